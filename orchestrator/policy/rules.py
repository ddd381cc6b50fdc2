"""The rules of an InferencePolicy, once: each as a Python check and as the CEL expression of the
ValidatingAdmissionPolicy, both made from the same table entry.

A rule reads a *source* (the values of the profile it judges: the PVC names, the Secret names, the
pod annotation keys, a timeout) and compares them with one field of the policy. A source knows how
to read those values from a validated profile and how to read the same values from the object at
admission, where defaults are not filled in (an absent field then counts as the profile's default,
as deployctl would deploy it). Three kinds of rules cover the policy:

- ``NameRule``: every value must match an entry of a policy list (a name, or a prefix ending in
  ``*``); an unset list allows any value except those the safe default refuses.
- ``FlagRule``: values that are refused unless a policy switch allows them (hostPath, fsGroup 0, …).
- ``CeilingRule``: a number that must not exceed the policy's ceiling.

tests/test_policy.py holds the Python checks to the safe defaults and the rendered CEL to this
table; e2e/test_policy_cluster.py runs the CEL on the API server over a table of cases and compares its
verdicts with the Python checks'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from pydantic import BaseModel

from orchestrator.profile import base as profile_base
from orchestrator.profile import model as profiles
from orchestrator.profile import placement as profile_placement
from orchestrator.profile import weights as profile_weights

Values = list[tuple[str, str]]  # (profile field path, value)


class PolicySpecView(Protocol):
    """What a rule reads of an InferencePolicy's spec (policy_model.PolicySpec, which sits above this
    module): its ceilings; the lists and switches a rule reads by its ``param`` name."""

    @property
    def ceilings(self) -> object: ...


def matches(pattern: str, value: str) -> bool:
    """A policy entry matches a value: equal, or a prefix ending in ``*`` (``*`` alone: anything)."""
    return pattern == value or (pattern.endswith("*") and value.startswith(pattern[:-1]))


_CEL_MATCH = "(p == n || (p.endsWith('*') && n.startsWith(p.substring(0, p.size() - 1))))"


def _has(path: str) -> str:
    """CEL that is true when every step of ``object.spec.<path>`` is present."""
    steps = path.split(".")
    return " && ".join("has(object.spec." + ".".join(steps[: i + 1]) + ")" for i in range(len(steps)))


def _cel_list(path: str, filter_: str | None, item: str) -> str:
    """CEL: the list at ``path``, filtered by ``filter_`` (over ``x``), each mapped to ``item``; [] when absent."""
    chain = f"object.spec.{path}"
    if filter_:
        chain += f".filter(x, {filter_})"
    return f"({_has(path)} ? {chain}.map(x, {item}) : [])"


def _cel_one(path: str) -> str:
    return f"({_has(path)} ? [object.spec.{path}] : [])"


@dataclasses.dataclass(frozen=True)
class Source:
    """Values of a profile, read from the model (``read``) and from the object at admission (``cel``, a
    CEL list of strings)."""

    read: Callable[[profiles.Profile], Values]
    cel: str


def _secret_names(p: profiles.Profile) -> Values:
    e = p.engine
    found: Values = []
    if p.model.credentialsSecret is not None:
        found.append(("model.credentialsSecret", p.model.credentialsSecret))
    found += [(f"engine.imagePullSecrets[{i}]", s) for i, s in enumerate(e.imagePullSecrets)]
    for i, var in enumerate(e.env):
        if var.valueFrom is not None and var.valueFrom.secretKeyRef is not None:
            found.append((f"engine.env[{i}].valueFrom.secretKeyRef.name", var.valueFrom.secretKeyRef.name))
    for i, source in enumerate(e.envFrom):
        if source.secretRef is not None:
            found.append((f"engine.envFrom[{i}].secretRef.name", source.secretRef.name))
    for i, volume in enumerate(e.volumes):
        if volume.secret is not None:
            found.append((f"engine.volumes[{i}].secret.secretName", volume.secret.secretName))
    if p.gate.apiKeySecret is not None:
        found.append(("gate.apiKeySecret.name", p.gate.apiKeySecret.name))
    return found


SECRETS = Source(
    _secret_names,
    " + ".join(
        [
            _cel_one("model.credentialsSecret"),
            _cel_list("engine.imagePullSecrets", None, "x"),
            _cel_list(
                "engine.env", "has(x.valueFrom) && has(x.valueFrom.secretKeyRef)", "x.valueFrom.secretKeyRef.name"
            ),
            _cel_list("engine.envFrom", "has(x.secretRef)", "x.secretRef.name"),
            _cel_list("engine.volumes", "has(x.secret)", "x.secret.secretName"),
            _cel_one("gate.apiKeySecret.name"),
        ]
    ),
)


def _pvc_names(p: profiles.Profile) -> Values:
    found: Values = []
    if isinstance(p.model.source, profile_weights.PvcSource):
        found.append(("model.source.pvc", p.model.source.pvc))
    for i, volume in enumerate(p.engine.volumes):
        if volume.persistentVolumeClaim is not None:
            found.append(
                (f"engine.volumes[{i}].persistentVolumeClaim.claimName", volume.persistentVolumeClaim.claimName)
            )
    if p.engine.compileCache is not None and p.engine.compileCache.pvc is not None:
        found.append(("engine.compileCache.pvc", p.engine.compileCache.pvc))
    return found


PVCS = Source(
    _pvc_names,
    _cel_one("model.source.pvc")
    + " + "
    + _cel_list("engine.volumes", "has(x.persistentVolumeClaim)", "x.persistentVolumeClaim.claimName")
    + " + "
    + _cel_one("engine.compileCache.pvc"),
)

IMAGE = Source(lambda p: [("engine.image", p.engine.image)], "[object.spec.engine.image]")


def _toleration_keys(p: profiles.Profile) -> Values:
    return [(f"placement.tolerations[{i}].key", t.key or "") for i, t in enumerate(p.placement.tolerations)]


# An absent placement.tolerations is the profile's default: deployctl deploys that, so admission judges it.
_DEFAULT_TOLERATION_KEYS = [t.key or "" for t in profile_placement.PlacementSpec().tolerations]
TOLERATIONS = Source(
    _toleration_keys,
    f"({_has('placement.tolerations')} ? object.spec.placement.tolerations.map(x, has(x.key) ? x.key : '') : "
    f"{_DEFAULT_TOLERATION_KEYS!r})",
)
NODE_SELECTOR = Source(
    lambda p: [(f"placement.nodeSelector.{k}", k) for k in p.placement.nodeSelector],
    _cel_list("placement.nodeSelector", None, "x"),
)
PRIORITY_CLASS = Source(
    lambda p: (
        [("placement.priorityClassName", p.placement.priorityClassName)]
        if p.placement.priorityClassName is not None
        else []
    ),
    _cel_one("placement.priorityClassName"),
)
ANNOTATIONS = Source(
    lambda p: [(f"placement.podAnnotations.{k}", k) for k in p.placement.podAnnotations],
    _cel_list("placement.podAnnotations", None, "x"),
)

# Pod annotations that turn a confinement off: AppArmor's (before the appArmorProfile field) and
# seccomp's alpha annotations, with the value `unconfined`.
UNCONFINED_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/",
)


def _unconfined(p: profiles.Profile) -> Values:
    return [
        (f"placement.podAnnotations.{k}", k)
        for k, v in p.placement.podAnnotations.items()
        if k.startswith(UNCONFINED_PREFIXES) and v.strip().lower() == "unconfined"
    ]


_CEL_UNCONFINED_KEY = " || ".join(f"x.startsWith({p!r})" for p in UNCONFINED_PREFIXES)
UNCONFINED = Source(
    _unconfined,
    _cel_list(
        "placement.podAnnotations",
        f"({_CEL_UNCONFINED_KEY}) && object.spec.placement.podAnnotations[x].trim().lowerAscii() == 'unconfined'",
        "x",
    ),
)
HOST_PATH = Source(
    lambda p: (
        [("model.source.hostPath", p.model.source.hostPath)]
        if isinstance(p.model.source, profile_weights.HostPathSource)
        else []
    ),
    _cel_one("model.source.hostPath"),
)
# A writable directory of the node, so listed by path rather than allowed by a switch.
CACHE_HOST_PATH = Source(
    lambda p: (
        [("engine.compileCache.hostPath", p.engine.compileCache.hostPath)]
        if p.engine.compileCache is not None and p.engine.compileCache.hostPath is not None
        else []
    ),
    _cel_one("engine.compileCache.hostPath"),
)
ROOT_FS_GROUP = Source(
    lambda p: [("engine.fsGroup", "0")] if p.engine.fsGroup == 0 else [],
    f"({_has('engine.fsGroup')} && object.spec.engine.fsGroup == 0 ? ['0'] : [])",
)
UNPINNED_IMAGE = Source(
    lambda p: [] if profile_base.DIGEST.search(p.engine.image) else [("engine.image", p.engine.image)],
    "(object.spec.engine.image.matches('@sha256:[0-9a-f]{64}$') ? [] : [object.spec.engine.image])",
)


@dataclasses.dataclass(frozen=True)
class NameRule:
    """Every value must match an entry of the policy list ``param``; with the list unset, the values
    matching ``refused_by_default`` are refused."""

    id: str
    param: str
    source: Source
    what: str
    refused_by_default: tuple[str, ...] = ()
    unset: str = ""  # what an unset list allows, for the message

    def violations(self, p: profiles.Profile, spec: PolicySpecView) -> Values:
        allowed: Sequence[str] | None = getattr(spec, self.param)
        if allowed is None:
            return [(f, v) for f, v in self.source.read(p) if any(matches(r, v) for r in self.refused_by_default)]
        return [(f, v) for f, v in self.source.read(p) if not any(matches(a, v) for a in allowed)]

    def cel(self) -> str:
        listed = f"params.spec.{self.param}"
        allowed = f"({self.source.cel}).all(n, {listed}.exists(p, {_CEL_MATCH}))"
        refused = list(self.refused_by_default)
        default = f"({self.source.cel}).all(n, !{refused!r}.exists(p, {_CEL_MATCH}))" if refused else "true"
        return f"has({listed}) ? {allowed} : {default}"

    def message(self) -> str:
        unset = f" (unset: {self.unset})" if self.unset else ""
        return f"{self.what} must be listed in the policy's {self.param}{unset}"


@dataclasses.dataclass(frozen=True)
class FlagRule:
    """Values refused unless the policy's switch ``param`` is true (false by default: the safe default)."""

    id: str
    param: str
    source: Source
    what: str

    def violations(self, p: profiles.Profile, spec: PolicySpecView) -> Values:
        return [] if getattr(spec, self.param) else self.source.read(p)

    def cel(self) -> str:
        return f"(has(params.spec.{self.param}) && params.spec.{self.param}) || ({self.source.cel}).size() == 0"

    def message(self) -> str:
        return f"{self.what} is refused unless the policy sets {self.param}: true"


@dataclasses.dataclass(frozen=True)
class CeilingRule:
    """A number of the profile (its default when absent) at most the policy's ``ceilings.<param>``."""

    id: str
    param: str
    path: str  # dotted, under the profile
    default_ceiling: int

    def value(self, p: profiles.Profile) -> int | None:
        node: object = p
        for step in self.path.split("."):
            node = getattr(node, step, None)  # an optional section left out (rollout.warmup) has no value
        return node if isinstance(node, int) and not isinstance(node, bool) else None

    def violations(self, p: profiles.Profile, spec: PolicySpecView) -> Values:
        value = self.value(p)
        return [(self.path, str(value))] if value is not None and value > getattr(spec.ceilings, self.param) else []

    def cel(self) -> str:
        ceiling = (
            f"(has(params.spec.ceilings) && has(params.spec.ceilings.{self.param}) ? "
            f"params.spec.ceilings.{self.param} : {self.default_ceiling})"
        )
        default = _profile_default(self.path)
        if default is None:  # optional, no default: unset is within any ceiling
            return f"!({_has(self.path)}) || object.spec.{self.path} <= {ceiling}"
        judged = f"({_has(self.path)} ? object.spec.{self.path} : {default}) <= {ceiling}"
        section = self.path.rpartition(".")[0]
        if _optional_section(section):  # rollout.warmup left out: nothing to bound, as the Python check says
            return f"!({_has(section)}) || {judged}"
        return judged

    def message(self) -> str:
        return f"{self.path} must be at most the policy's ceilings.{self.param}"


def _optional_section(path: str) -> bool:
    """Whether the section at ``path`` may be left out of a profile (its default is None)."""
    model: type[BaseModel] | None = profiles.Profile
    steps = path.split(".")
    for step in steps[:-1]:
        assert model is not None, f"{path}: {step} is no section"
        model = profile_base.model_in(model.model_fields[step].annotation)
    assert model is not None, f"{path}: no section holds {steps[-1]}"
    field = model.model_fields[steps[-1]]
    return field.default is None and field.default_factory is None


def _profile_default(path: str) -> int | None:
    model: type[BaseModel] | None = profiles.Profile
    steps = path.split(".")
    for step in steps[:-1]:
        assert model is not None, f"{path}: {step} is no section"  # the rule table names real sections
        model = profile_base.model_in(model.model_fields[step].annotation)
    assert model is not None, f"{path}: no section holds {steps[-1]}"
    default = model.model_fields[steps[-1]].default
    return None if default is None else int(default)


Rule = NameRule | FlagRule | CeilingRule
DEFAULT_CEILING_SECONDS = _TWO_HOURS = (
    7200  # two hours: the slowest sane model load and gate, not a stuck object's forever
)

RULES: tuple[Rule, ...] = (
    FlagRule("unpinned-image", "allowUnpinnedImages", UNPINNED_IMAGE, "an engine.image not pinned by digest"),
    NameRule("registry", "allowedRegistries", IMAGE, "engine.image"),
    FlagRule("host-path", "allowHostPath", HOST_PATH, "weights from a hostPath (model.source.hostPath)"),
    NameRule(
        "compile-cache-host-path",
        "allowedCompileCacheHostPaths",
        CACHE_HOST_PATH,
        "engine.compileCache.hostPath",
        refused_by_default=("*",),
        unset="none: a compile cache on the node is refused",
    ),
    NameRule(
        "pvc",
        "allowedPVCs",
        PVCS,
        "every PersistentVolumeClaim (model.source.pvc, engine.volumes, engine.compileCache.pvc)",
    ),
    FlagRule("root-fsgroup", "allowRootFsGroup", ROOT_FS_GROUP, "engine.fsGroup 0 (root's group)"),
    NameRule(
        "secret",
        "allowedSecrets",
        SECRETS,
        "every Secret named (model.credentialsSecret, engine.imagePullSecrets, env, envFrom, volumes, "
        "gate.apiKeySecret)",
    ),
    NameRule(
        "toleration",
        "allowedTolerations",
        TOLERATIONS,
        "every placement.tolerations key",
        refused_by_default=("",),
        unset="any key; a toleration without a key, which tolerates every taint, only where the list holds *",
    ),
    NameRule("node-selector", "allowedNodeSelectorKeys", NODE_SELECTOR, "every placement.nodeSelector key"),
    NameRule(
        "priority-class",
        "allowedPriorityClasses",
        PRIORITY_CLASS,
        "placement.priorityClassName",
        refused_by_default=("system-*",),
        unset="any but system-*",
    ),
    NameRule("pod-annotation", "allowedPodAnnotations", ANNOTATIONS, "every placement.podAnnotations key"),
    FlagRule("unconfined", "allowUnconfined", UNCONFINED, "an AppArmor or seccomp `unconfined` pod annotation"),
    CeilingRule(
        "progress-deadline", "progressDeadlineSeconds", "rollout.progressDeadlineSeconds", DEFAULT_CEILING_SECONDS
    ),
    CeilingRule("group-join", "groupJoinSeconds", "rollout.groupJoinSeconds", DEFAULT_CEILING_SECONDS),
    CeilingRule("health-timeout", "healthTimeoutSeconds", "gate.health.timeoutSeconds", DEFAULT_CEILING_SECONDS),
    CeilingRule("smoke-timeout", "smokeTimeoutSeconds", "gate.smoke.timeoutSeconds", DEFAULT_CEILING_SECONDS),
    CeilingRule("startup", "startupSeconds", "engine.startupSeconds", DEFAULT_CEILING_SECONDS),
    CeilingRule("warmup", "warmupSeconds", "rollout.warmup.timeoutSeconds", DEFAULT_CEILING_SECONDS),
)
