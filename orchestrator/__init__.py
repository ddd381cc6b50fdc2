"""deployctl: plan, render, apply, gate, roll back and audit vLLM inference on Kubernetes.

The command is ``deployctl`` (orchestrator.cli); docs/architecture.md maps each module to its
step of the data flow.
"""

__version__ = "0.3.0"
