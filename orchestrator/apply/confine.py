"""What deployctl may write for a release, whatever a record or a profile says (docs/security.md).

Two checks, both before the first write of an apply, a rollback or an automatic rollback:

- ``check``: every object is one of the kinds the renderer emits for a release
  (``kube.kinds.RELEASE_KINDS``, with their apiVersions), in the release's namespace and labelled
  for the release; a PrometheusRule holds only the alerts deployctl writes for the release
  (``render.alerts.problems``). A stored record's manifests are only bytes in a ConfigMap that a namespace
  editor can write, so a restore must not apply a ClusterRoleBinding or a Deployment in
  ``kube-system`` because a record holds one. A violation is tampering (``OutsideRelease``, exit 9).
- ``survey`` and ``refuse_takeover``: which of the objects already exist without the release's
  label. Server-side apply with ``force`` would take them over (a Service's selector, a
  ServiceAccount's cloud-IAM annotation), so they are refused (``Takeover``, exit 5) unless the
  user adopts them (``--adopt``). An object labelled for another release is never adopted.

Plain data in, plain data out; the caller passes a ``get`` that reads one object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from orchestrator import conventions, errors
from orchestrator.kube import kinds
from orchestrator.kube import status as kube_status
from orchestrator.render import alerts

Get = Callable[[str, str, str], Mapping[str, object] | None]  # (kind, name, namespace) -> object or None
_SHOWN = 5  # objects named in one message; the rest are counted
_GATEWAY_GROUP = "gateway.networking.k8s.io"


def problems(release: str, namespace: str, objects: Sequence[Mapping[str, object]]) -> list[str]:
    """Why each object that falls outside the release does, one clause per object; empty when none does."""
    found = []
    for index, obj in enumerate(objects):
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping):
            found.append(f"object #{index + 1} is not a Kubernetes object with metadata")
            continue
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        what = f"{kind}/{meta.get('name')}" + (f" in namespace {meta['namespace']}" if meta.get("namespace") else "")
        labels = meta.get("labels")
        label = labels.get(conventions.RELEASE_LABEL) if isinstance(labels, Mapping) else None
        if not isinstance(kind, str) or kind not in kinds.RELEASE_KINDS:
            found.append(f"{what} is not a kind deployctl renders for a release")
        elif api_version != kinds.api_version(kind):
            found.append(f"{what} has apiVersion {api_version}, not {kinds.api_version(kind)}")
        elif meta.get("namespace") != namespace:
            found.append(f"{what} is outside the release's namespace {namespace}")
        elif label != release:
            found.append(f"{what} is not labelled {conventions.RELEASE_LABEL}={release}")
        elif not isinstance(meta.get("name"), str) or not meta["name"]:
            found.append(f"{what} has no name")
        elif kind == conventions.PROMETHEUS_RULE_KIND:
            # Prometheus evaluates a rule across every namespace it scrapes, and routes its alerts by
            # their labels: only the rules deployctl writes for this release may be restored.
            found += [f"{what}: {p}" for p in alerts.problems(obj.get("spec"), namespace, release)]
        elif kind == conventions.HTTP_ROUTE_KIND:
            found += [f"{what}: {p}" for p in _route_problems(obj.get("spec"), release)]
    return found


_ROUTE_KEYS = {"parentRefs", "hostnames", "rules"}
_PARENT_KEYS = {"group", "kind", "name", "namespace", "sectionName"}
_BACKEND_KEYS = {"name", "port"}


def _route_problems(spec: object, release: str) -> list[str]:
    """A route sends a Gateway's requests wherever it says, and a filter may mirror or redirect them: it
    may hold only what the template renders, Gateways as parents and one backend, the release's Service
    in its namespace. (A canary's weighted backends are deployctl's own writes, never restored.)"""
    if not isinstance(spec, Mapping):
        return ["its spec is not an object"]
    found = [f"spec.{key} is not what deployctl renders" for key in sorted(set(spec) - _ROUTE_KEYS)]
    parents = spec.get("parentRefs", [])
    for ref in parents if isinstance(parents, list) else [None]:
        if not (isinstance(ref, Mapping) and set(ref) <= _PARENT_KEYS and _is_gateway(ref)):
            found.append("a parent is not a Gateway as deployctl renders it")
    rules = spec.get("rules")
    for rule in rules if isinstance(rules, list) and rules else [None]:
        backends = rule.get("backendRefs") if isinstance(rule, Mapping) and set(rule) == {"backendRefs"} else None
        if not isinstance(backends, list) or len(backends) != 1:
            found.append("a rule is not the one backend deployctl renders (no matches, filters or other backends)")
            continue
        (ref,) = backends
        if not isinstance(ref, Mapping) or not set(ref) <= _BACKEND_KEYS or ref.get("name") != release:
            found.append(f"its backend is not the release's Service {release} in its namespace")
    return found


def _is_gateway(ref: Mapping[str, object]) -> bool:
    return ref.get("group") == _GATEWAY_GROUP and ref.get("kind") == "Gateway"


def check(release: str, namespace: str, objects: Sequence[Mapping[str, object]], source: str) -> None:
    """Refuse (``OutsideRelease``, exit 9) objects that are not the release's own; ``source`` says
    where they came from ("revision 3's stored manifests", "the rendered profile")."""
    found = problems(release, namespace, objects)
    if found:
        raise errors.OutsideRelease(
            f"{source} of release {release} in namespace {namespace} would write outside the release: "
            f"{_listed(found)}. deployctl writes only the kinds it renders, in the release's namespace, labelled "
            f"{conventions.RELEASE_LABEL}={release}, so this is tampering: nothing was written. Inspect the records "
            f"(`deployctl audit verify {release} -n {namespace}`) and compare them with an exported copy"
        )


def stored_objects(manifests: bytes, source: str, release: str, namespace: str) -> list[dict[str, Any]]:
    """The objects of a record's stored manifests; ``OutsideRelease`` (exit 9) when they are not
    YAML objects, which deployctl never stores."""
    where = f"{source} of release {release} in namespace {namespace}"
    try:
        objects = [o for o in yaml.safe_load_all(manifests.decode()) if o]
    except (ValueError, RecursionError, yaml.YAMLError) as e:  # ValueError: not UTF-8, or an oversized int
        raise errors.OutsideRelease(
            f"{where} are not YAML ({errors.shorten(str(e), 160)}): they were changed outside deployctl. Nothing "
            f"was written; inspect the records (`deployctl audit verify {release} -n {namespace}`)"
        ) from None
    if not all(isinstance(o, dict) for o in objects):
        raise errors.OutsideRelease(
            f"{where} hold something that is not a Kubernetes object: they were changed outside deployctl. Nothing "
            f"was written; inspect the records (`deployctl audit verify {release} -n {namespace}`)"
        )
    return objects


@dataclasses.dataclass(frozen=True)
class Existing:
    """An object that exists under a name the release would write."""

    kind: str
    name: str
    owner: str | None  # the release its label names; None when it has no release label
    managers: tuple[str, ...]  # its field managers: who applied it

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def describe(self) -> str:
        if self.owner is not None:
            return f"{self.ref} (it belongs to release {self.owner})"
        return self.ref + (f" (applied by {', '.join(self.managers)})" if self.managers else "")


def survey(namespace: str, objects: Sequence[Mapping[str, object]], get: Get) -> list[Existing]:
    """The objects of ``objects`` that already exist in ``namespace``, whoever they belong to."""
    found = []
    for obj in objects:
        kind, name = kube_status.text(obj.get("kind")), kube_status.name_of(obj)
        live = get(kind, name, namespace)
        if live is None:
            continue
        meta = kube_status.Meta.from_object(live)
        found.append(Existing(kind, name, meta.labels.get(conventions.RELEASE_LABEL), meta.managers))
    return found


def refuse_takeover(release: str, namespace: str, found: Sequence[Existing], *, adopt: bool) -> list[Existing]:
    """The objects of ``found`` that are not the release's and would be adopted; refused
    (``Takeover``, exit 5) before any write: all of them without ``adopt``, another release's always."""
    others = [e for e in found if e.owner is not None and e.owner != release]
    if others:
        raise errors.Takeover(
            f"release {release} in namespace {namespace} would write over "
            f"{_listed([e.describe() for e in others])}: deployctl never moves an object from one release to "
            "another. Give this release another name (metadata.name). Nothing was changed"
        )
    foreign = [e for e in found if e.owner is None]
    if foreign and not adopt:
        raise errors.Takeover(
            f"release {release} in namespace {namespace} would take over {_listed([e.describe() for e in foreign])}: "
            f"they exist without the label {conventions.RELEASE_LABEL}={release}, and applying would replace their "
            "spec, labels and annotations (a Service's selector, a ServiceAccount's annotations). Nothing was "
            "changed. Give the release another name (metadata.name), delete those objects, or, once you have "
            "checked that they may be replaced, apply again with --adopt (the adoption is recorded)"
        )
    return foreign


def before_writing(
    release: str, namespace: str, objects: Sequence[Mapping[str, object]], get: Get, source: str, adopt: bool
) -> tuple[list[Existing], list[Existing]]:
    """Both checks before the first write of ``objects``: what exists already under their names,
    and what of it is adopted (empty unless ``adopt``)."""
    check(release, namespace, objects, source)
    found = survey(namespace, objects, get)
    return found, refuse_takeover(release, namespace, found, adopt=adopt)


def adoption(adopted: Sequence[Existing]) -> str:
    """The adoption, for the record's description: the record format has no field for it, and the
    description is what `deployctl history` shows."""
    return f", adopting {', '.join(e.ref for e in adopted)} (--adopt)" if adopted else ""


def left_in_place(existed: frozenset[tuple[str, str]]) -> str:
    """What a failed first install left, for its message: the (kind, name) objects there before it."""
    kept = sorted(f"{kind}/{name}" for kind, name in existed)
    return f" ({', '.join(kept)} existed before it and were left as this apply changed them)" if kept else ""


def _listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:_SHOWN])
    return shown + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")
