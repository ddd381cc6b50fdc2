"""The command line: argv and DEPLOYCTL_* variables in; one library call per command, its output
printed and an exit code out. ``main`` (the click group of ``app``) is re-exported so the console
script ``orchestrator.cli:main``, ``python -m orchestrator`` and ``python -m orchestrator.cli`` keep working.
"""

from orchestrator.cli.app import main

__all__ = ["main"]
