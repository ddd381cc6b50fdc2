"""The kubeconfig's default namespace, as kubectl finds it: the current (or ``--context``) context's.

Plain YAML reading, no client: ``KUBECONFIG`` may list several files (``:``-separated on Unix), and
kubectl's merge rules apply: the first file that sets ``current-context`` wins, and so does the
first file that defines a context of a given name. Inside a pod without a kubeconfig, the service
account's namespace file answers, as for kubectl.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from orchestrator import errors, user_files

SERVICE_ACCOUNT_NAMESPACE = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """``(context name, namespace)`` when the chosen context names a namespace; None otherwise.

    An unreadable or malformed kubeconfig gives None here: connecting reports it with its fix.
    """
    env = os.environ if environ is None else environ
    spec = kubeconfig or env.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    paths = [p for p in spec.split(os.pathsep) if p] if kubeconfig is None else [kubeconfig]
    docs = [_read(p) for p in paths]
    if not any(d is not None for d in docs) and kubeconfig is None and env.get("KUBERNETES_SERVICE_HOST"):
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            return None
        return ("in-cluster", namespace) if namespace else None
    current: str | None = context or next(
        (str(d["current-context"]) for d in docs if d and d.get("current-context")), None
    )
    if not current:
        return None
    for doc in docs:
        for entry in (doc or {}).get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == current:
                body = entry.get("context") or {}
                own = body.get("namespace") if isinstance(body, dict) else None
                return (current, str(own)) if own else None
    return None


def _read(path: str) -> dict[str, Any] | None:
    try:
        raw = user_files.read(path, "kubeconfig", user_files.KUBECONFIG_BYTES)  # never /dev/zero or a FIFO
        if len(raw) > user_files.KUBECONFIG_BYTES:
            return None
        doc = yaml.safe_load(raw)
    except (errors.UsageError, ValueError, RecursionError, yaml.YAMLError):
        return None
    return doc if isinstance(doc, dict) else None
