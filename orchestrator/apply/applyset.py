"""The objects of one release in the cluster: access check, server-side apply, prune, remove.

A release's objects are found by the ``deployctl.dev/release`` label, never by guessing from
names, so pruning removes exactly what an earlier revision of this release created.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
from collections.abc import Collection, Sequence
from typing import Any

from orchestrator import conventions, errors
from orchestrator.kube import Kube, kinds
from orchestrator.kube import status as kube_status
from orchestrator.kube.status import Object

RELEASE_LABEL = conventions.RELEASE_LABEL
# Metadata the API server writes: never part of what a release is, so never stored or compared.
SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
)
SERVER_ANNOTATIONS = ("deployment.kubernetes.io/revision", "kubectl.kubernetes.io/last-applied-configuration")
GROUP_KINDS = conventions.GROUP_KINDS
OPTIONAL_KINDS = kinds.OPTIONAL_KINDS
MANAGED_KINDS = kinds.RELEASE_KINDS
APPLY_ORDER = kinds.APPLY_ORDER
# What a release's group objects (and its PodMonitor, PrometheusRule and HTTPRoute) need beyond
# REQUIRED_ACCESS, by kind: asked only of a profile that renders them, so a single-node release never
# needs KubeRay's or LWS's permissions.
GROUP_ACCESS: dict[str, list[kinds.Access]] = {
    **{kind: kinds.access([kind], ("get", "list", "watch", "patch", "delete")) for kind in GROUP_KINDS},
    **{kind: kinds.access([kind], ("get", "list", "patch", "delete")) for kind in conventions.MONITORING_KINDS},
    # A canary weighed on the route waits for its two Services' endpoints before pointing the route at them.
    conventions.HTTP_ROUTE_KIND: [
        *kinds.access([conventions.HTTP_ROUTE_KIND], ("get", "list", "patch", "delete")),
        *kinds.access(["EndpointSlice"], ("list",)),
    ],
}

# What apply, gate and rollback do in the release's namespace: (verb, group, resource, subresource).
# Checked before the first write, so a Role missing one verb fails fast, names it, and changes nothing.
# The warm-up (rollout.warmup) creates a pod per target node and deletes it when done.
WARMUP_ACCESS: list[kinds.Access] = kinds.access(["Pod"], ("create", "delete"))
REQUIRED_ACCESS: list[kinds.Access] = [
    *kinds.access(kinds.CORE_KINDS, ("get", "list", "watch", "patch", "delete")),
    *kinds.access(["ConfigMap"], ("create", "list")),
    *kinds.access(["Lease"], ("get", "create", "update")),
    *kinds.access(["ReplicaSet", "Pod"], ("list", "watch")),
    *kinds.access(["Pod"], ("get",), "log"),
    *kinds.access(["Pod"], ("create",), "portforward"),
    *kinds.access(["Event"], ("list", "watch")),
]


def check_access(
    kube: Kube,
    namespace: str,
    group_kind: str | None = None,
    *,
    extras: Collection[str] = (),
    warmup: bool = False,
) -> None:
    """Refuse before any write when the identity lacks a permission the sequence will need
    (``group_kind``: the group object the release renders, ``extras``: the Prometheus Operator and
    Gateway API kinds it renders, ``warmup``: it runs warm-up pods; their permissions are asked too)."""
    required = REQUIRED_ACCESS + (GROUP_ACCESS[group_kind] if group_kind else [])
    required += [access for kind in extras for access in GROUP_ACCESS[kind]]
    required += WARMUP_ACCESS if warmup else []
    missing = missing_access(kube, namespace, required)
    if missing:
        raise errors.Forbidden(
            f"the identity of context {kube.context!r} may not: {', '.join(missing)} in namespace {namespace}. "
            "Nothing was changed. Bind it to deployctl's Role (`deployctl render PROFILE --format rbac`)"
        )


def missing_access(kube: Kube, namespace: str, required: list[kinds.Access]) -> list[str]:
    """Which of ``required`` (verb, group, resource, subresource) the identity may not do in
    ``namespace``, as "verb resource[/sub] (group)"; empty when it may do them all."""
    # One rules review shows most or all of them granted in one round trip (Node and RBAC
    # authorizers). Each one it does not show, or all of them behind a webhook authorizer, is
    # asked on its own (an access review, authoritative), in parallel: each is a round trip.
    shown = kube.granted_by_rules(namespace, required)
    unsure = [a for a, ok in zip(required, shown, strict=True) if not ok]
    allowed: list[bool] = []
    if unsure:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            allowed = list(pool.map(lambda a: kube.can_i(a[0], a[2], namespace, group=a[1], subresource=a[3]), unsure))
    return [
        f"{verb} {resource}{'/' + sub if sub else ''}" + (f" ({group})" if group else "")
        for (verb, group, resource, sub), ok in zip(unsure, allowed, strict=True)
        if not ok
    ]


def ensure_namespace(kube: Kube, namespace: str, create: bool) -> None:
    if kube.get("Namespace", namespace) is not None:
        return
    if not create:
        raise errors.RolloutFailed(f"namespace {namespace} does not exist; create it, or pass --create-namespace")
    with contextlib.suppress(errors.Conflict):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def apply(kube: Kube, name: str, namespace: str, objects: Sequence[Object], *, keep_old_copies: bool = False) -> None:
    """Server-side apply every object, then prune this release's objects the new set no longer has.

    ``keep_old_copies`` leaves the old group objects (RayClusters) running beside the new ones: a
    group surge, whose old copies are pruned (``prune``) once the new ones passed the gate.
    """
    for obj in objects:
        kube.apply(obj)
    prune(kube, name, namespace, objects, kinds=_SINGLE_KINDS if keep_old_copies else MANAGED_KINDS)


def prune(
    kube: Kube, name: str, namespace: str, objects: Sequence[Object], *, kinds: tuple[str, ...] = MANAGED_KINDS
) -> None:
    """Delete this release's objects of ``kinds`` that ``objects`` does not hold."""
    _delete_except(kube, name, namespace, kinds, {_key(o) for o in objects})


def _key(obj: Object) -> tuple[str, str]:
    """(kind, name): how a release's objects are told apart."""
    return kube_status.text(obj.get("kind")), kube_status.name_of(obj)


def _delete_except(
    kube: Kube,
    name: str,
    namespace: str,
    of_kinds: tuple[str, ...],
    keep: set[tuple[str, str]] | frozenset[tuple[str, str]],
) -> None:
    for kind in of_kinds:
        for item in release_objects(kube, kind, name, namespace):
            if (kind, item["metadata"]["name"]) not in keep:
                kube.delete(kind, item["metadata"]["name"], namespace)


_SINGLE_KINDS = tuple(k for k in MANAGED_KINDS if k not in GROUP_KINDS)


def release_objects(kube: Kube, kind: str, name: str, namespace: str) -> list[dict[str, Any]]:
    """The release's objects of ``kind``. A group kind or PodMonitor whose CRD is not installed, or
    that this identity may not read (it never rendered one), has none."""
    try:
        items, _ = kube.list(kind, namespace, labels=f"{RELEASE_LABEL}={name}")
    except (errors.NotFound, errors.Forbidden):
        if kind not in OPTIONAL_KINDS:
            raise
        return []
    return items


def remove(kube: Kube, name: str, namespace: str, *, keep: frozenset[tuple[str, str]] = frozenset()) -> None:
    """Delete every object of the release but the (kind, name) pairs in ``keep`` (a failed first
    install leaves nothing behind that it created, and removes nothing that was there before it)."""
    _delete_except(kube, name, namespace, MANAGED_KINDS, keep)


def pod_template_changes(kube: Kube, rendered: Object, live: Object) -> bool:
    """Whether applying ``rendered`` (a Deployment) would replace pods: a server-side dry-run fills
    in the same defaults as the live object, so the two pod templates compare exactly."""
    try:
        would_be = kube.apply(rendered, dry_run=True)
    except errors.ClusterError:
        return True  # cannot tell: assume the rollout happens, which is the careful answer
    return _template(would_be) != _template(live)


def _template(obj: Object) -> object:
    return kube_status.mapping(obj.get("spec")).get("template")


def clean(obj: Object) -> dict[str, object]:
    """``obj`` without status and what the API server wrote into its metadata: what was applied."""
    cleaned = copy.deepcopy(dict(obj))
    cleaned.pop("status", None)
    meta = cleaned.get("metadata")
    if not isinstance(meta, dict):
        return cleaned
    for key in SERVER_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in SERVER_ANNOTATIONS:
            annotations.pop(key, None)
    if not annotations:
        meta.pop("annotations", None)
    return cleaned


def live_objects(kube: Kube, name: str, namespace: str) -> list[dict[str, object]]:
    """The release's objects as they are in the cluster now (what a GitOps tool applied), cleaned,
    in the order deployctl applies them, so that stored bytes can be re-applied by a rollback."""
    found: list[dict[str, object]] = []
    for kind in APPLY_ORDER:
        items = release_objects(kube, kind, name, namespace)
        found += [clean(item) for item in sorted(items, key=lambda o: o["metadata"]["name"])]
    return found


def planned_changes(kube: Kube, name: str, namespace: str, objects: Sequence[Object]) -> list[dict[str, str]]:
    """What applying ``objects`` would do, object by object, found by a server-side dry-run: each
    entry is {"object": "Kind/name", "action": "create" | "update" | "unchanged" | "delete"}.
    Nothing is written."""
    namespace_exists = kube.get("Namespace", namespace) is not None
    changes: list[dict[str, str]] = []
    for obj in objects:
        kind, obj_name = _key(obj)
        live = kube.get(kind, obj_name, namespace) if namespace_exists else None
        if live is None:
            action = "create"
        else:
            after = kube.apply(obj, dry_run=True)
            action = "unchanged" if clean(after) == clean(live) else "update"
        changes.append({"object": f"{kind}/{obj_name}", "action": action})
    keep = {_key(o) for o in objects}
    for kind in MANAGED_KINDS if namespace_exists else ():
        items = release_objects(kube, kind, name, namespace)
        changes += [
            {"object": f"{kind}/{item['metadata']['name']}", "action": "delete"}
            for item in items
            if (kind, item["metadata"]["name"]) not in keep
        ]
    return changes
