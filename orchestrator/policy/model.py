"""What InferenceProfiles may use, as a cluster admin says it: the InferencePolicy and its check.

An InferencePolicy (deployctl.dev/v1, cluster-scoped) is owned by whoever owns the cluster, not by
the teams whose namespaces hold InferenceProfiles. It lists the registries, PVCs, Secrets,
tolerations, node labels, priority classes and pod annotations a profile may name, the switches
that allow what is refused by default (hostPath weights, fsGroup 0, `unconfined` annotations,
images by tag) and the ceilings on every wait. Every field's default is the safe default, which is
also what applies where no InferencePolicy exists.

``check(profile, policies)`` is the one entry point: the controller calls it before it writes
anything for an object, and the ValidatingAdmissionPolicy (orchestrator/policy/admission.py) runs the
same rules (orchestrator/policy/rules.py) as CEL at admission.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import pydantic
from pydantic import Field

from orchestrator import errors
from orchestrator.policy import rules as policy_rules
from orchestrator.profile import base as profile_base
from orchestrator.profile import gate_endpoint
from orchestrator.profile import model as profiles

KIND = "InferencePolicy"
API_VERSION = profiles.RESOURCE_API_VERSION
PLURAL = "inferencepolicies"
DEFAULT_NAME = "default"  # the policy `render --format admission` ships: the safe defaults, every namespace
FAILURE_CLASS = "policy"  # the failure class of a refused InferenceProfile's status
SAFE_DEFAULT = "the safe default (no InferencePolicy applies to this namespace)"


class Ceilings(profile_base.Model):
    """The longest waits a profile may ask for: each bounds how long one object can hold a worker."""

    progressDeadlineSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS,
        ge=60,
        description="Most rollout.progressDeadlineSeconds may say, in seconds. Default two hours: a 405B model "
        "loads in well under one.",
    )
    healthTimeoutSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS, ge=1, description="Most gate.health.timeoutSeconds may say."
    )
    smokeTimeoutSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS, ge=1, description="Most gate.smoke.timeoutSeconds may say."
    )
    groupJoinSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS, ge=10, description="Most rollout.groupJoinSeconds may say."
    )
    startupSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS, ge=30, description="Most engine.startupSeconds may say."
    )
    warmupSeconds: int = Field(
        default=policy_rules.DEFAULT_CEILING_SECONDS,
        ge=30,
        description="Most rollout.warmup.timeoutSeconds may say.",
    )


def _names(what: str) -> list[str] | None:
    return Field(
        default=None,
        description=f"{what} a profile may name: each entry a name, or a prefix ending in `*` (`*` alone: any). "
        "Unset: any. Empty: none.",
    )


class PolicySpec(profile_base.Model):
    """The spec of an InferencePolicy; every default is the safe default."""

    namespaces: list[str] | None = Field(
        default=None,
        description="Namespaces whose InferenceProfiles this policy judges. Unset: every namespace. Where several "
        "policies apply, a profile must satisfy each of them.",
    )
    allowedRegistries: list[str] | None = _names("Images (engine.image), e.g. `registry.internal/vllm/*`,")
    allowUnpinnedImages: bool = Field(
        default=False,
        description="Allow an engine.image by tag (engine.allowUnpinnedImage). Off: only images pinned by digest, "
        "so what runs is what was reviewed.",
    )
    allowedPVCs: list[str] | None = _names(
        "PersistentVolumeClaims (model.source.pvc, engine.volumes, engine.compileCache.pvc)"
    )
    allowHostPath: bool = Field(
        default=False,
        description="Allow weights from a hostPath on the node (model.source.hostPath). Off: a hostPath mounts any "
        "directory of the node into the pod.",
    )
    allowedCompileCacheHostPaths: list[str] | None = Field(
        default=None,
        description="Node directories a profile may name as engine.compileCache.hostPath, each a path or a prefix "
        "ending in `*` (e.g. `/var/lib/deployctl/compile-cache/*`). Unset or empty: none, as the pod writes there.",
    )
    allowRootFsGroup: bool = Field(
        default=False,
        description="Allow engine.fsGroup 0. Off: group 0 gives the pod root's group on its volumes' files.",
    )
    allowedSecrets: list[str] | None = _names(
        "Secrets (model.credentialsSecret, engine.imagePullSecrets, env, envFrom, volumes, gate.apiKeySecret)"
    )
    allowedTolerations: list[str] | None = Field(
        default=None,
        description="Taint keys placement.tolerations may tolerate: names, or prefixes ending in `*`. Unset: any "
        "key; a toleration without a key (it tolerates every taint, the control plane's included) only where "
        "this lists `*`.",
    )
    allowedNodeSelectorKeys: list[str] | None = _names("Node label keys (placement.nodeSelector)")
    allowedPriorityClasses: list[str] | None = Field(
        default=None,
        description="PriorityClasses placement.priorityClassName may name: names, or prefixes ending in `*`. "
        "Unset: any but `system-*` (system-node-critical pre-empts the node's own daemons).",
    )
    allowedPodAnnotations: list[str] | None = _names("Pod annotation keys (placement.podAnnotations)")
    allowUnconfined: bool = Field(
        default=False,
        description="Allow AppArmor or seccomp `unconfined` pod annotations. Off: the pod keeps its confinement.",
    )
    ceilings: Ceilings = Field(default_factory=Ceilings, description="The longest waits a profile may ask for.")
    allowedGateHosts: list[str] = Field(
        default_factory=list,
        description="Hosts other than the release's own Service that gate.endpoint, and "
        "rollout.canary.metrics.prometheusUrl, may name (exact host names). The gate's API key is only ever "
        "sent to the release's own Service.",
    )


@dataclasses.dataclass(frozen=True)
class Policy:
    """One InferencePolicy: its name (for messages) and spec."""

    name: str
    spec: PolicySpec

    def applies_to(self, namespace: str) -> bool:
        return self.spec.namespaces is None or namespace in self.spec.namespaces


SAFE_DEFAULT_POLICY = Policy(SAFE_DEFAULT, PolicySpec())


@dataclasses.dataclass(frozen=True)
class Violation:
    """A profile field the policy refuses."""

    policy: str
    rule: str
    field: str
    value: str
    message: str


def from_object(obj: Mapping[str, object]) -> Policy:
    """The policy an InferencePolicy object holds; InvalidInstall (naming it) when its spec does not validate."""
    metadata = obj.get("metadata")
    name = str(metadata.get("name", "?")) if isinstance(metadata, Mapping) else "?"
    try:
        return Policy(name, PolicySpec.model_validate(obj.get("spec") or {}))
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise errors.InvalidInstall(
            f"InferencePolicy {name}: spec.{where}: {first['msg']}; fix the policy (kubectl edit inferencepolicy "
            f"{name}); until then every profile it applies to is refused"
        ) from None


def applicable(policies: Iterable[Policy], namespace: str) -> list[Policy]:
    """The policies that judge ``namespace``; none: the safe default."""
    found = [p for p in policies if p.applies_to(namespace)]
    return found or [SAFE_DEFAULT_POLICY]


def allowed_gate_hosts(policies: Iterable[Policy], namespace: str) -> tuple[str, ...]:
    """The hosts besides the release's own Service that the controller's gate, and a canary's
    Prometheus, may reach for a profile in ``namespace``: those every applicable policy allows (as
    each of them must allow every other field); the safe default allows none."""
    applying = applicable(policies, namespace)
    allowed = set.intersection(*(gate_endpoint.host_names(p.spec.allowedGateHosts) for p in applying))
    return tuple(sorted(allowed))


def check(profile: profiles.Profile, policies: Iterable[Policy] = ()) -> list[Violation]:
    """Every field of ``profile`` that a policy applying to its namespace refuses (none: allowed)."""
    found: list[Violation] = []
    for policy in applicable(policies, profile.metadata.namespace):
        for rule in policy_rules.RULES:
            for field, value in rule.violations(profile, policy.spec):
                found.append(Violation(policy.name, rule.id, field, value, rule.message()))
    return found


def describe(profile: profiles.Profile, violations: list[Violation]) -> str:
    """One paragraph: the object, each refused field with its value and rule, and the fix."""
    parts = [
        f"{v.field} {errors.shorten(v.value, 80)!r}: {v.message} (rule {v.rule}, InferencePolicy {v.policy})"
        for v in violations
    ]
    return (
        f"InferenceProfile {profile.metadata.namespace}/{profile.metadata.name} is refused by policy: "
        + "; ".join(parts)
        + ". Nothing was written. Change the profile, or ask the cluster admin to allow it in the InferencePolicy "
        "(kubectl get inferencepolicies), then set the deployctl.dev/retry annotation to a new value"
    )
