"""The objects of one release in the cluster: access check, server-side apply, prune, remove.

A release's objects are found by the ``deployctl.dev/release`` label, never by guessing from
names, so pruning removes exactly what an earlier revision of this release created.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any

from orchestrator import errors
from orchestrator.kube import Kube

RELEASE_LABEL = "deployctl.dev/release"
MANAGED_KINDS = ("Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy")

# What apply, gate and rollback do in the release's namespace: (verb, group, resource, subresource).
# Checked before the first write, so a Role missing one verb fails fast, names it, and changes nothing.
REQUIRED_ACCESS: list[tuple[str, str, str, str]] = [
    *[
        (verb, group, resource, "")
        for group, resource in (
            ("apps", "deployments"),
            ("", "services"),
            ("", "serviceaccounts"),
            ("policy", "poddisruptionbudgets"),
            ("networking.k8s.io", "networkpolicies"),
        )
        for verb in ("get", "list", "watch", "patch", "delete")
    ],
    ("create", "", "configmaps", ""),
    ("list", "", "configmaps", ""),
    ("get", "coordination.k8s.io", "leases", ""),
    ("create", "coordination.k8s.io", "leases", ""),
    ("update", "coordination.k8s.io", "leases", ""),
    ("list", "apps", "replicasets", ""),
    ("watch", "apps", "replicasets", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("get", "", "pods", "log"),
    ("create", "", "pods", "portforward"),
    ("list", "", "events", ""),
    ("watch", "", "events", ""),
]


def check_access(kube: Kube, namespace: str) -> None:
    """Refuse before any write when the identity lacks a permission the sequence will need."""
    # One review per permission, asked in parallel: on a remote API server each is a round trip.
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        allowed = list(
            pool.map(lambda a: kube.can_i(a[0], a[2], namespace, group=a[1], subresource=a[3]), REQUIRED_ACCESS)
        )
    missing = [
        f"{verb} {resource}{'/' + sub if sub else ''}" + (f" ({group})" if group else "")
        for (verb, group, resource, sub), ok in zip(REQUIRED_ACCESS, allowed, strict=True)
        if not ok
    ]
    if missing:
        raise errors.Forbidden(
            f"the identity of context {kube.context!r} may not: {', '.join(missing)} in namespace {namespace}. "
            "Nothing was changed. Bind it to deployctl's Role (`deployctl render PROFILE --format rbac`)"
        )


def ensure_namespace(kube: Kube, namespace: str, create: bool) -> None:
    if kube.get("Namespace", namespace) is not None:
        return
    if not create:
        raise errors.RolloutFailed(f"namespace {namespace} does not exist; create it, or pass --create-namespace")
    with contextlib.suppress(errors.Conflict):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def apply(kube: Kube, name: str, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Server-side apply every object, then prune this release's objects the new set no longer has."""
    for obj in objects:
        kube.apply(obj)
    keep = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind in MANAGED_KINDS:
        items, _ = kube.list(kind, namespace, labels=f"{RELEASE_LABEL}={name}")
        for item in items:
            if (kind, item["metadata"]["name"]) not in keep:
                kube.delete(kind, item["metadata"]["name"], namespace)


def remove(kube: Kube, name: str, namespace: str) -> None:
    """Delete every object of the release (a failed first install leaves nothing behind)."""
    for kind in MANAGED_KINDS:
        items, _ = kube.list(kind, namespace, labels=f"{RELEASE_LABEL}={name}")
        for item in items:
            kube.delete(kind, item["metadata"]["name"], namespace)


def pod_template_changes(kube: Kube, rendered: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether applying ``rendered`` (a Deployment) would replace pods: a server-side dry-run fills
    in the same defaults as the live object, so the two pod templates compare exactly."""
    try:
        would_be = kube.apply(rendered, dry_run=True)
    except errors.ClusterError:
        return True  # cannot tell: assume the rollout happens, which is the careful answer
    return bool(would_be.get("spec", {}).get("template") != live.get("spec", {}).get("template"))
