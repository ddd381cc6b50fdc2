"""Which cluster a command talks to: the kubeconfig file and context it connects with.

Every cluster command (apply, gate, rollback, the read-only views, the controller) carries one and
hands its two fields to ``orchestrator.kube.connect`` when it needs the cluster.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Connection:
    """The kubeconfig file and context to use; None for either takes kubectl's defaults
    (``KUBECONFIG`` or ``~/.kube/config``, its current context; in a pod, the service account)."""

    kubeconfig: str | None = None
    context: str | None = None
