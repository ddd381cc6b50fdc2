"""The kinds deployctl reads or writes: where each lives in the REST API, and which make up a release.

One table, so that the client's paths, applyset's apply and prune, uninstall's delete order, the
access checks made before a write and the Role deployctl renders for itself (a test holds the
templates to this table) never disagree about a kind; ``rule_grants`` reads an RBAC rule the way
the API server does. A static table keeps start-up free of discovery calls. Pure data: nothing
here reaches the network.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from orchestrator import conventions, errors


@dataclasses.dataclass(frozen=True)
class Ref:
    """Where a kind lives in the REST API."""

    group_version: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group as RBAC rules name it: "" for the core group."""
        return self.group_version.rpartition("/")[0]

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        # A namespaced kind without a namespace: all namespaces (list/watch only).
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        if sub is not None:
            base += f"/{sub}"
        return base


KINDS: dict[str, Ref] = {
    "Namespace": Ref("v1", "namespaces", namespaced=False),
    "Node": Ref("v1", "nodes", namespaced=False),
    "Pod": Ref("v1", "pods"),
    "Service": Ref("v1", "services"),
    "ServiceAccount": Ref("v1", "serviceaccounts"),
    "ConfigMap": Ref("v1", "configmaps"),
    "Secret": Ref("v1", "secrets"),
    "Event": Ref("v1", "events"),
    "Deployment": Ref("apps/v1", "deployments"),
    "ReplicaSet": Ref("apps/v1", "replicasets"),
    "PodDisruptionBudget": Ref("policy/v1", "poddisruptionbudgets"),
    "NetworkPolicy": Ref("networking.k8s.io/v1", "networkpolicies"),
    "EndpointSlice": Ref("discovery.k8s.io/v1", "endpointslices"),  # read only: a canary's weighed Services
    "Lease": Ref("coordination.k8s.io/v1", "leases"),
    "Role": Ref("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": Ref("rbac.authorization.k8s.io/v1", "rolebindings"),
    "ClusterRole": Ref("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Ref("rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False),
    # Group engines for copies that span nodes; their CRDs exist only where KubeRay or LWS is installed.
    "RayCluster": Ref("ray.io/v1", "rayclusters"),
    "LeaderWorkerSet": Ref("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    # Prometheus Operator scraping (profile monitoring.podMonitor); its CRD exists where the operator is installed.
    conventions.POD_MONITOR_KIND: Ref("monitoring.coreos.com/v1", "podmonitors"),
    conventions.PROMETHEUS_RULE_KIND: Ref("monitoring.coreos.com/v1", "prometheusrules"),  # monitoring.alerts
    # Gateway API routing (rollout.canary.traffic httpRoute); its CRD exists where the Gateway API is installed.
    conventions.HTTP_ROUTE_KIND: Ref("gateway.networking.k8s.io/v1", "httproutes"),
    # deployctl's own resource: a profile as an object, reconciled by `deployctl controller`.
    "InferenceProfile": Ref("deployctl.dev/v1", "inferenceprofiles"),
    # What InferenceProfiles may use, as the cluster admin says (orchestrator/policy/model.py).
    "InferencePolicy": Ref("deployctl.dev/v1", "inferencepolicies", namespaced=False),
}

# Every kind the renderer emits for a release: the one list of what deployctl may write for a
# release (orchestrator.apply.confine), prune and delete (applyset, uninstall), in the order prune
# goes through them. A test holds it equal to what the templates render.
RELEASE_KINDS: tuple[str, ...] = (
    "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy",
    *conventions.OPTIONAL_KINDS,
)  # fmt: skip
# Release kinds whose CRD a cluster may lack: a release that never rendered one has none to list.
OPTIONAL_KINDS: tuple[str, ...] = conventions.OPTIONAL_KINDS
# The release kinds every profile renders.
CORE_KINDS: tuple[str, ...] = tuple(k for k in RELEASE_KINDS if k not in OPTIONAL_KINDS)
# The order render gives them, and apply follows: the NetworkPolicy before the first pod, the
# ServiceAccount before the pods. Uninstall deletes in the reverse order.
APPLY_ORDER: tuple[str, ...] = (
    "ServiceAccount", "NetworkPolicy", "Service", "PodDisruptionBudget", "Deployment", *OPTIONAL_KINDS
)  # fmt: skip

# One permission as an access review asks it: (verb, API group, resource, subresource).
Access = tuple[str, str, str, str]


def ref_of(kind: str) -> Ref:
    try:
        return KINDS[kind]
    except KeyError:
        raise errors.UsageError(f"deployctl does not handle objects of kind {kind!r}") from None


def api_version(kind: str) -> str:
    """The apiVersion deployctl writes objects of ``kind`` with."""
    return ref_of(kind).group_version


def access(kinds: Iterable[str], verbs: Iterable[str], subresource: str = "") -> list[Access]:
    """The permissions to do each of ``verbs`` to each of ``kinds`` (kind by kind, verbs in order)."""
    wanted = tuple(verbs)
    return [(verb, ref_of(k).group, ref_of(k).plural, subresource) for k in kinds for verb in wanted]


def rule_grants(rule: Mapping[str, object], verb: str, group: str, resource: str, subresource: str) -> bool:
    """Whether one listed rule allows a request without an object name, as RBAC decides it
    (k8s.io/kubernetes pkg/apis/rbac/v1 evaluation_helpers.go: VerbMatches, APIGroupMatches,
    ResourceMatches, ResourceNameMatches)."""
    if rule.get("resourceNames"):  # grants only the named objects; a list or create has no name
        return False
    verbs, groups, resources = (_strings(rule.get(key)) for key in ("verbs", "apiGroups", "resources"))
    if "*" not in verbs and verb not in verbs:
        return False
    if "*" not in groups and group not in groups:
        return False
    combined = f"{resource}/{subresource}" if subresource else resource
    return "*" in resources or combined in resources or (bool(subresource) and f"*/{subresource}" in resources)


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
