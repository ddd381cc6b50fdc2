"""The checks an apply makes against the cluster before its first write, behind one entry point.

``run`` reads what it needs (the identity, RBAC, the CRDs the profile's objects need, the gate's API
key Secret, the release's records, Nodes, Pods and the live workload), renders the release once and
hands back the verdict of ``orchestrator.plan.preflight`` with the objects to write and those there
already. It writes nothing: a refusal here leaves the cluster as it was.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator import conventions, errors
from orchestrator.apply import applyset, confine, time_to_serving
from orchestrator.kube import Kube
from orchestrator.plan import planner, preflight
from orchestrator.profile import gate_auth
from orchestrator.profile.model import Profile
from orchestrator.records import releases
from orchestrator.records import trust as record_trust
from orchestrator.render import canary as render_canary
from orchestrator.render import manifests as render

# (phase, message), as the sequences report progress (orchestrator.apply.verify.Reporter).
Report = Callable[[str, str], None]


@dataclasses.dataclass(frozen=True)
class Checked:
    """What the apply goes on with once every check passed, or the verdict's refusal."""

    user: str  # the identity that writes (the lock's holder, the records' actor)
    verdict: preflight.Preflight
    replaces_pods: bool  # only a changed pod template does; an SLO or gate change replaces nothing
    # The release's objects, rendered once, the Deployment's strategy the verdict's choice.
    objects: list[dict[str, Any]]
    found: list[confine.Existing] = dataclasses.field(default_factory=list)  # there before the apply
    adopted: list[confine.Existing] = dataclasses.field(default_factory=list)  # taken over (--adopt)


def run(
    kube: Kube, profile: Profile, plan: planner.Plan, keys: record_trust.Keys, report: Report, *, adopt: bool
) -> Checked:
    """Every check before the first write; ``report`` hears the verdict's warnings, its strategy and
    what --adopt takes over. The verdict's refusal comes back in ``verdict.refusal`` (nothing after it
    is checked); the other checks raise (exit codes in docs/cli.md)."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    user = kube.whoami()
    group_kind = check_group_engine(kube, profile)
    extras = extra_kinds(profile)
    check_extra_kinds(kube, profile, extras)
    warmup = profile.rollout.warmup is not None and profile.rollout.warmup.enabled
    applyset.check_access(kube, namespace, group_kind, extras=extras, warmup=warmup)
    check_api_key_secret(kube, profile)
    # Read before the lock's Lease is written: a record this deployctl cannot read (a newer
    # format, an edit, signatures without a key to check them) refuses the apply with nothing
    # changed. The sequence reads them again under the lock.
    record_trust.for_write(kube, name, namespace, keys)
    objects = render.render(profile, plan)
    verdict, replaces_pods = _verdict(kube, profile, objects)
    checked = Checked(user, verdict, replaces_pods, objects)
    for warning in verdict.warnings:
        report("preflight", f"warning: {warning}")
    if verdict.refusal:
        return checked
    report(
        "preflight", f"strategy: {verdict.strategy_name}" + (" (downtime: no spare GPUs)" if verdict.downtime else "")
    )
    if verdict.canary_mode:
        mode = verdict.canary_mode
        report("preflight", f"canary: {CANARY_PLACES[mode]} ({_CANARY_WHY[mode]})")
    with_strategy(objects, verdict.strategy)
    # The canary's Deployment too, which only the canary's steps write (orchestrator.apply.canary), and the
    # two Services a canary weighed on the route writes: another's object under their names is a takeover.
    canary = render_canary.workloads(objects, name, _canary_copies(profile)) if verdict.canary_mode else []
    service = render_canary.service_of(objects, name)
    if canary and service is not None and profile.rollout.canary and profile.rollout.canary.traffic == "httpRoute":
        canary += render_canary.side_services(service, name, "", render_canary.service_port(service))
    found, adopted = confine.before_writing(name, namespace, objects + canary, kube.get, "the rendered profile", adopt)
    if adopted:
        report("preflight", f"adopting {', '.join(e.describe() for e in adopted)} (--adopt)")
    return dataclasses.replace(checked, found=found, adopted=adopted)


def _canary_copies(profile: Profile) -> int:
    """The most copies the canary's steps run: one RayCluster each, when the copies span nodes."""
    spec = profile.rollout.canary
    return spec.largest_step(profile.rollout.replicas) if spec is not None else 0


# Where preflight puts rollout.canary's copies (preflight.Preflight.canary_mode), and why.
CANARY_PLACES = {"beside": "beside the stable copies", "replace": "in place of stable copies, step by step"}
_CANARY_WHY = {
    "beside": "the cluster has room for the largest step's copies",
    "replace": "no room for a copy beside them",
}


def with_strategy(objects: list[dict[str, Any]], strategy: Mapping[str, object]) -> None:
    """Set the Deployment's ``spec.strategy`` to preflight's choice, as ``render(strategy=…)`` writes it
    (tests/test_cluster_preflight.py holds the two equal). Groups have none (``strategy`` is {}): copies
    across nodes change by the group strategy instead."""
    if not strategy:
        return
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["strategy"] = copy.deepcopy(dict(strategy))


def _startup_probes(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every startup probe of the release's pod templates (a Deployment's, a copy's head and workers)."""
    templates: list[Any] = []
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "Deployment":
            templates.append(spec.get("template"))
        elif obj["kind"] == "RayCluster":
            templates.append((spec.get("headGroupSpec") or {}).get("template"))
            templates += [g.get("template") for g in spec.get("workerGroupSpecs") or []]
    containers = [c for t in templates if t for c in (t.get("spec") or {}).get("containers") or []]
    return [c["startupProbe"] for c in containers if isinstance(c.get("startupProbe"), dict)]


def startup_budget(objects: list[dict[str, Any]]) -> int | None:
    """Seconds the rendered startup probe lets a pod load (failureThreshold × periodSeconds); None without one."""
    probes = _startup_probes(objects)
    return min(int(p["failureThreshold"]) * int(p["periodSeconds"]) for p in probes) if probes else None


def _verdict(kube: Kube, profile: Profile, objects: list[dict[str, Any]]) -> tuple[preflight.Preflight, bool]:
    """The preflight verdict, and whether the apply replaces pods (only a changed pod template
    does; an SLO or gate change must not be refused as downtime, nor wait for a surge)."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    nodes, _ = kube.list("Node")
    pods, _ = kube.list("Pod", fields=preflight.POD_FIELDS)
    if profile.multi_node:
        # Copies are named by their pod templates' hash: new names are new pods. Scaling only adds
        # copies beside the running ones (or removes some), which replaces nothing.
        live = {o["metadata"]["name"] for o in applyset.release_objects(kube, "RayCluster", name, namespace)}
        wanted = {o["metadata"]["name"] for o in objects if o["kind"] in conventions.GROUP_KINDS}
        replaces_pods = bool(live - wanted) and bool(wanted - live)
    else:
        deployment = kube.get("Deployment", name, namespace)
        template = next(o for o in objects if o["kind"] == "Deployment")
        replaces_pods = deployment is not None and applyset.pod_template_changes(kube, template, deployment)
    return preflight.check(profile, nodes, pods, replaces_pods), replaces_pods


def check_group_engine(kube: Kube, profile: Profile) -> str | None:
    """The group kind a copy across nodes needs (None for one-pod copies), refused before any write
    when deployctl cannot drive it here: LeaderWorkerSet is rendered only (no LWS controller could
    run in our tests, so its rollout judge is unproven), and a cluster without KubeRay's CRD would
    take the release's other objects and never run the copy."""
    if not profile.multi_node:
        return None
    if profile.placement.groupEngine == "lws":
        raise errors.UsageError(
            f"{profile.metadata.name} spans {profile.nodes_per_copy} nodes per copy on LeaderWorkerSet "
            "(placement.groupEngine: lws). deployctl renders LeaderWorkerSets (`deployctl render`, the Helm chart) "
            "for your GitOps tool, but does not apply or gate them: no LeaderWorkerSet controller could run in its "
            "tests, so its rollout watch is unproven. Use placement.groupEngine: kuberay with KubeRay installed, or "
            "apply the rendered LeaderWorkerSet with your GitOps tool (docs/multinode.md)"
        )
    try:
        kube.list("RayCluster", profile.metadata.namespace)
    except errors.NotFound:
        raise errors.RolloutFailed(
            f"{profile.metadata.name} spans {profile.nodes_per_copy} nodes per copy and runs each copy as a KubeRay "
            "RayCluster, but this cluster does not serve RayCluster (ray.io/v1): install KubeRay's ray-operator "
            "and its CRDs (docs/multinode.md). Nothing was changed"
        ) from None
    except errors.Forbidden:
        pass  # check_access names the missing permission
    return "RayCluster"


def check_api_key_secret(kube: Kube, profile: Profile) -> None:
    """Refuse before any write a profile whose gate cannot read its API key: found only at gate time,
    it would cost a whole model load, and the rollback's own gate would fail the same way."""
    if profile.gate.apiKeySecret is None:
        return
    try:
        gate_auth.read(kube.get, profile.metadata.namespace, profile.gate.apiKeySecret)
    except gate_auth.ApiKeyUnavailable as e:
        raise errors.RolloutFailed(f"{e.message}. Nothing was changed") from None


def extra_kinds(profile: Profile) -> list[str]:
    """The optional CRD kinds the profile renders beside its workload: a PodMonitor, a PrometheusRule with
    alerts, an HTTPRoute with a canary weighed on one."""
    canary = profile.rollout.canary
    fields = {
        conventions.POD_MONITOR_KIND: profile.monitoring.podMonitor.enabled,
        conventions.PROMETHEUS_RULE_KIND: profile.monitoring.alerts.enabled,
        conventions.HTTP_ROUTE_KIND: canary is not None and canary.traffic == "httpRoute",
    }
    return [kind for kind, enabled in fields.items() if enabled]


_OPERATOR = "monitoring.coreos.com/v1", "the Prometheus Operator's CRDs (kube-prometheus-stack has them)"
# Per kind: the field that asks for it, what serves it and where its CRD comes from, and the other way.
_EXTRA_FIELDS = {
    conventions.POD_MONITOR_KIND: ("monitoring.podMonitor.enabled", *_OPERATOR, "scrape /metrics another way"),
    conventions.PROMETHEUS_RULE_KIND: (
        "monitoring.alerts.enabled",
        *_OPERATOR,
        "load `deployctl render --format rules` another way",
    ),
    conventions.HTTP_ROUTE_KIND: (
        "rollout.canary.traffic httpRoute",
        "gateway.networking.k8s.io/v1",
        "the Gateway API's standard CRDs",
        "let the Service spread the canary's traffic (traffic service)",
    ),
}


def check_extra_kinds(kube: Kube, profile: Profile, extras: list[str]) -> None:
    """Refuse before any write a profile whose PodMonitor, PrometheusRule or HTTPRoute the cluster cannot
    take: without the CRD the apply would fail after the workload changed."""
    for kind in extras:
        field, group_version, crds, otherwise = _EXTRA_FIELDS[kind]
        try:
            kube.list(kind, profile.metadata.namespace)
        except errors.NotFound:
            raise errors.RolloutFailed(
                f"{profile.metadata.name} sets {field}, but this cluster does not serve {kind} ({group_version}): "
                f"install {crds}, or drop {field} and {otherwise}. Nothing was changed"
            ) from None
        except errors.Forbidden:
            pass  # check_access names the missing permission


def startup_probe_warning(
    profile: Profile, plan: planner.Plan, live: releases.Record | None, objects: list[dict[str, Any]]
) -> str | None:
    """Whether the startup probe would kill a pod still loading: the slowest start the live revision
    showed on the same setup, with time_to_serving.STARTUP_MARGIN, against what the rendered probe
    allows. Said, never changed here: a probe is part of the pod template, so changing it by itself
    would replace every pod on an apply that changes nothing else; engine.startupSeconds is the fix."""
    same = live is not None and live.plan is not None and planner.same_setup(live.plan, profile, plan)
    slowest = time_to_serving.slowest_start(live.time_to_serving) if live and same else None
    allowed = startup_budget(objects)
    if slowest is None or allowed is None or (floor := time_to_serving.startup_floor(slowest)) <= allowed:
        return None
    assert live is not None
    return (
        f"the startup probe allows {allowed} s but revision {live.revision}'s pods took up to {slowest:.0f} s from "
        f"container start to Ready: a restarted pod would be killed while it loads; set engine.startupSeconds to "
        f"at least {floor}"
    )
