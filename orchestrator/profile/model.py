"""The InferenceProfile: its pydantic models and the strict loader that turns a file into one.

Every field carries a description (unit, and why the default is what it is); the profile
reference in docs/ and the profile's JSON Schema are generated from these models. The model
section lives in profile_weights, hardware and placement in profile_placement, the engine
section in profile_engine, its pod-level parts in profile_pod, the gate's SLOs, API key and
endpoint in slo, gate_auth and gate_endpoint, what they share in profile_base and the error
messages in profile_errors; this module is the entry callers import.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Callable, Mapping
from typing import Annotated, Literal

import pydantic
from pydantic import Field, PrivateAttr

from orchestrator import engines, errors, user_files
from orchestrator.profile import base as profile_base
from orchestrator.profile import canary as profile_canary
from orchestrator.profile import engine as profile_engine
from orchestrator.profile import errors as profile_errors
from orchestrator.profile import gate_auth, gate_endpoint, slo, strictyaml
from orchestrator.profile import monitoring as profile_monitoring
from orchestrator.profile import placement as profile_placement
from orchestrator.profile import pod as profile_pod
from orchestrator.profile import warmup as profile_warmup
from orchestrator.profile import weights as profile_weights

API_VERSION = "deployctl/v1"
KIND = "InferenceProfile"
# The same profile as a Kubernetes object (orchestrator/controller/crd.py): metadata, and the rest under spec.
CRD_GROUP = "deployctl.dev"
RESOURCE_API_VERSION = f"{CRD_GROUP}/v1"
# Labels tools put on objects they manage (Flux, Argo CD, Helm, Kubernetes' recommended labels):
# an InferenceProfile object's own, never carried into the release's labels.
_TOOL_LABEL_PREFIXES = (
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "argocd.argoproj.io/",
    *("app.kubernetes.io/", "deployctl.dev/"),
)
DEFAULT_VLLM_VERSION = profile_engine.DEFAULT_VLLM_VERSION


class _Model(profile_base.Model):
    """The sections defined in this file (a subclass, not an alias, so pydantic's mypy plugin sees it)."""


class Metadata(_Model):
    name: Annotated[str, profile_base.dns_label_of("release name")] = Field(
        description="Release name: a DNS-1123 label (≤63 chars). Names the Deployment, Service and the release "
        "records, so it must stay the same across upgrades of one deployment.",
        examples=["llama3-70b"],
    )
    namespace: Annotated[str, profile_base.dns_label_of("namespace")] = Field(
        default="default",
        description="Namespace the release lives in, with its release records and lock.",
        examples=["inference"],
    )
    labels: profile_base.UserLabels = Field(
        default_factory=dict,
        description="Extra labels put on every rendered object (e.g. team, cost centre).",
    )


class RolloutSpec(_Model):
    replicas: int = Field(default=1, ge=1, le=1000, description="Model copies; each holds TP × PP GPUs.")
    strategy: Literal["auto", "surge", "no-surge", "recreate"] = Field(
        default="auto",
        description="`auto` surges when a spare node has free GPUs, else replaces one pod at a time "
        "(maxSurge 0, maxUnavailable 1), because surge without free GPUs hangs forever.",
    )
    allowDowntime: bool = Field(
        default=False,
        description="Allow a rollout that leaves no replica serving (one replica, no spare GPUs). Off: such a "
        "rollout is refused with an explanation.",
    )
    progressDeadlineSeconds: int = Field(
        default=1800, ge=60, description="Deployment progress deadline; 70B models take minutes to load."
    )
    groupJoinSeconds: int = Field(
        default=600,
        ge=10,
        le=86_400,
        description="For a copy that spans nodes: how long its workers may take to join the head (Ray "
        "registration, or the multiprocessing rendezvous) once their pods run, before the copy is reported "
        "`group_incomplete`. vLLM starts serving only after every worker joined.",
    )
    revisionHistory: int = Field(
        default=10,
        ge=1,
        le=100,
        description="Old ReplicaSets the Deployment keeps (`revisionHistoryLimit`). deployctl's own release "
        "records are never pruned: the audit chain needs every one.",
    )
    canary: profile_canary.CanarySpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serve the new revision on a few copies first and judge it on live traffic against the "
        "stable copies, step by step, before every copy moves (docs/canary.md).",
    )
    warmup: profile_warmup.WarmupSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Before a revision replaces pods, a warm-up pod without a GPU on each target node pulls the "
        "image and reads the weights into the page cache (and checks them, with model.verify) while the old "
        "revision serves (docs/time-to-serving.md#warm-up-and-verification).",
    )


class SmokeSpec(_Model):
    enabled: bool = Field(default=True, description="Run the smoke benchmark after /health passes.")
    concurrency: int = Field(default=16, ge=1, le=4096, description="Streams kept in flight.")
    requests: int = Field(default=64, ge=1, le=100_000, description="Measured requests.")
    warmup: int = Field(default=4, ge=0, le=10_000, description="Unmeasured warm-up requests sent first.")
    inputTokens: int = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="Prompt length in tokens as the server counts them (chat template included): prompts are "
        "sized from the server's usage, and a run whose prompts average more than 10% off is inconclusive.",
    )
    outputTokens: int = Field(default=128, ge=2, le=1_000_000, description="Tokens generated per request.")
    timeoutSeconds: int = Field(default=600, ge=1, description="Upper bound for the whole smoke run.")
    minSamples: int = Field(
        default=16, ge=1, description="Fewer completed requests than this makes the verdict Inconclusive."
    )
    slo: dict[str, str] = Field(
        default_factory=dict,
        description='SLOs, vLLM SLA syntax: metric → condition, e.g. `p95_ttft_ms: "<=1500"`, '
        '`output_throughput: ">=1800"`, `error_rate: "<=0.01"`. Metric names are those of `deployctl bench` '
        "(vLLM `bench serve` names), plus `time_to_serving_s`: seconds from the write to the smoke run's first "
        "token (docs/time-to-serving.md); an unknown one is refused with a did-you-mean.",
    )

    @pydantic.model_validator(mode="after")
    def _samples_reachable(self) -> SmokeSpec:
        if self.minSamples > self.requests:
            raise ValueError(
                f"minSamples ({self.minSamples}) is more than requests ({self.requests}): the gate could never "
                "judge and every run would be Inconclusive; lower minSamples or raise requests"
            )
        return self

    @pydantic.field_validator("slo")
    @classmethod
    def _slo_known(cls, v: dict[str, str]) -> dict[str, str]:
        # The gate's own parser: a metric the gate does not measure, or a condition it cannot read,
        # is refused here, before an apply writes anything (it used to crash the smoke step).
        slo.parse_slo(v)
        return v


class HealthSpec(_Model):
    timeoutSeconds: int = Field(
        default=1800,
        ge=1,
        description="How long every new pod may take to answer /health 200 and list the model.",
    )


class GateSpec(_Model):
    endpoint: Annotated[str, pydantic.AfterValidator(gate_endpoint.checked)] | None = Field(
        default=None,
        # The rules (the release's own Service by default, an allow-list for others, no user@, query or
        # fragment, the key only to the own Service) are orchestrator.profile.gate_endpoint's and docs/security.md's:
        # this text is in the CRD, which is held byte for byte to 0.1.0's (docs/upgrading.md).
        description="URL users call (load balancer or ingress). Unset: pods are reached by port-forward "
        "through the API server.",
        examples=["http://infer.internal:8000"],
    )
    health: HealthSpec = Field(default_factory=HealthSpec, description="The /health gate.")
    smoke: SmokeSpec = Field(default_factory=SmokeSpec, description="The post-deploy smoke benchmark.")
    maxRegression: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="Fail when a gated metric is worse than the last good release by more than this percent.",
    )
    apiKeySecret: gate_auth.ApiKeySecret | None = Field(
        default=None,
        description="Where the server's API key (vllm serve --api-key) lives, for the gate's /v1 requests. Unset: "
        "the server takes requests without a key. Only the Secret's name is stored, never the key.",
    )


class AirgapSpec(_Model):
    offline: bool = Field(
        default=True,
        description="Set HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE, VLLM_NO_USAGE_STATS and DO_NOT_TRACK in the pods.",
    )
    denyEgress: bool = Field(
        default=True,
        description="Render a NetworkPolicy that denies pod egress except DNS and allowEgressCIDRs.",
    )
    allowEgressCIDRs: list[str] = Field(
        default_factory=list, description="CIDRs the pods may still reach (e.g. an internal metrics sink)."
    )

    @pydantic.field_validator("allowEgressCIDRs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        import ipaddress

        for cidr in v:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR such as 10.0.0.0/8") from None
        return v


class Profile(_Model):
    apiVersion: Literal["deployctl/v1"] = Field(description="Schema version of the profile.")
    kind: Literal["InferenceProfile"] = Field(description="Always InferenceProfile.")
    metadata: Metadata = Field(description="Release name, namespace and labels.")
    model: profile_weights.ModelSpec = Field(description="What is served and where its weights live.")
    engine: profile_engine.EngineSpec = Field(description="The vLLM engine: image and serving parameters.")
    hardware: profile_placement.HardwareSpec = Field(description="The GPUs the model runs on.")
    placement: profile_placement.PlacementSpec = Field(
        default_factory=profile_placement.PlacementSpec, description="Where pods may land."
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="How a new revision replaces the old.")
    gate: GateSpec = Field(default_factory=GateSpec, description="What a revision must pass to be kept.")
    airgap: AirgapSpec = Field(default_factory=AirgapSpec, description="Offline and egress settings.")
    monitoring: profile_monitoring.MonitoringSpec = Field(
        default_factory=profile_monitoring.MonitoringSpec,
        description="Prometheus scraping, the release's alerts and its Grafana dashboard.",
    )

    @pydantic.field_validator("engine")
    @classmethod
    def _mounts_leave_the_weights_alone(
        cls, v: profile_engine.EngineSpec, info: pydantic.ValidationInfo
    ) -> profile_engine.EngineSpec:
        model = info.data.get("model")
        if model is not None:
            problems = profile_pod.model_mount_problems(v.volumeMounts, model.source.mountPath)
            if problems:
                raise profile_base.field_error(*problems[0])
        return v

    @pydantic.field_validator("rollout")
    @classmethod
    def _verify_needs_the_warmup(cls, v: RolloutSpec, info: pydantic.ValidationInfo) -> RolloutSpec:
        model = info.data.get("model")
        if model is not None and model.verify is not None and not (v.warmup and v.warmup.enabled):
            raise profile_base.field_error(
                ("warmup",),
                "model.verify is checked by the warm-up, which reads every byte of the weights on the target "
                "nodes: set rollout.warmup.enabled: true (or remove model.verify)",
            )
        return v

    @pydantic.model_validator(mode="after")
    def _canary_fits_the_release(self) -> Profile:
        if self.rollout.canary is not None:
            group_engine = self.placement.groupEngine if self.multi_node else None
            self.rollout.canary.check_release(self.rollout.replicas, group_engine, self.monitoring.podMonitor)
            self.rollout.canary.check_route_names(self.metadata.name)
        return self

    _base_dir: pathlib.Path = PrivateAttr(default_factory=pathlib.Path.cwd)
    _lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)
    # Paths set from outside the file (--set, -n) -> what set them: a message names that, not a line.
    _origins: dict[tuple[str | int, ...], str] = PrivateAttr(default_factory=dict)
    _source: str = PrivateAttr(default="<profile>")

    @property
    def base_dir(self) -> pathlib.Path:
        """Directory the profile was read from; relative paths (model.config) resolve against it."""
        return self._base_dir

    @property
    def source(self) -> str:
        """The file the profile was read from, for messages."""
        return self._source

    def line_of(self, field: str) -> int | None:
        """1-based YAML line of a dotted field path (or of its nearest written parent)."""
        path = _field_path(field)
        for cut in range(len(path), 0, -1):
            line = self._lines.get(path[:cut])
            if line is not None:
                return line
        return None

    def where(self, field: str) -> str:
        """Where a message should send the reader for ``field``: `` (from --set …)`` when a --set (or -n)
        gave it, else `` (line N)`` of the file, else nothing."""
        path = _field_path(field)
        for cut in range(len(path), 0, -1):
            origin = self._origins.get(path[:cut])
            if origin is not None:
                return f" (from {origin})"
        line = self.line_of(field)
        return f" (line {line})" if line else ""

    @property
    def gpus_per_copy(self) -> int:
        """GPUs one model copy holds: tensor-parallel × pipeline-parallel size."""
        return self.engine.tensorParallelSize * self.engine.pipelineParallelSize

    @property
    def nodes_per_copy(self) -> int:
        """Nodes one copy spans: placement.nodesPerCopy, else as many as its GPUs need."""
        if self.placement.nodesPerCopy is not None:
            return self.placement.nodesPerCopy
        return -(-self.gpus_per_copy // self.hardware.gpusPerNode)

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_copy > 1

    @property
    def gpus_per_pod(self) -> int:
        """GPUs each pod of a copy requests (one pod per node); the planner refuses uneven splits."""
        return -(-self.gpus_per_copy // self.nodes_per_copy)

    @property
    def nvlink_required(self) -> bool:
        if self.placement.requireNvlink is not None:
            return self.placement.requireNvlink
        return self.engine.tensorParallelSize > 2

    def server_settings(self) -> engines.ServerSettings:
        """The serving fields, as every engine maps them to its own flags."""
        engine = self.engine
        source = self.model.source
        return engines.ServerSettings(
            model_path=source.path if isinstance(source, profile_weights.PvcSource) else source.mountPath,
            served_name=self.model.name,
            port=engine.port,
            tensor_parallel=engine.tensorParallelSize,
            pipeline_parallel=engine.pipelineParallelSize,
            max_model_len=engine.maxModelLen,
            max_num_seqs=engine.maxNumSeqs,
            max_batched_tokens=engine.maxNumBatchedTokens,
            kv_cache_dtype=engine.kvCacheDtype,
            memory_fraction=engine.gpuMemoryUtilization,
            prefix_caching=engine.enablePrefixCaching,
            offline=self.airgap.offline,
            multi_node=self.multi_node,
            extra_args=tuple(engine.extraArgs),
            load_format=engine.loadFormat,
            loader_config=engine.loader_config,
        )

    def spec_hash(self) -> str:
        """SHA-256 of the canonical profile content; stamped on rendered objects to tie them to a profile."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _field_path(field: str) -> tuple[str | int, ...]:
    """``engine.extraArgs.0`` or ``placement.tolerations[0].key`` as a document path."""
    parts = field.replace("[", ".").replace("]", "").split(".")
    return tuple(int(p) if p.isdigit() else p for p in parts if p)


# --- loading ---------------------------------------------------------------------------------


def load(path: str | pathlib.Path) -> Profile:
    """Read and validate a profile file; raise InvalidProfile with field, line and fix."""
    p = pathlib.Path(path)
    raw = user_files.read(p, "profile", user_files.PROFILE_BYTES)  # a FIFO or a device refused, the read bounded
    return loads(raw, source=str(p), base_dir=p.resolve().parent)


def loads(
    raw: bytes | str,
    source: str = "<profile>",
    base_dir: pathlib.Path | None = None,
    transform: Callable[[strictyaml.Document], strictyaml.Document] | None = None,
) -> Profile:
    """Validate profile text; ``source`` names it in messages; ``transform`` (``--set``) edits the
    parsed document before validation."""
    data = raw.encode() if isinstance(raw, str) else raw
    try:
        doc = strictyaml.parse(data)
    except strictyaml.YamlProblem as e:
        where = f" (line {e.line})" if e.line else ""
        raise errors.InvalidProfile(f"{source}{where}: {e.message}") from e
    if doc.data.get("apiVersion") == RESOURCE_API_VERSION:
        doc = _from_resource(doc, source)
    if transform is not None:
        doc = transform(doc)
    try:
        profile = Profile.model_validate(doc.data)
    except pydantic.ValidationError as e:
        raise errors.InvalidProfile(profile_errors.describe(e, doc, source, Profile)) from e
    profile._base_dir = base_dir or pathlib.Path.cwd()
    profile._lines = dict(doc.lines)
    profile._origins = dict(doc.origins)
    profile._source = source
    return profile


def from_object(obj: Mapping[str, object], source: str) -> Profile:
    """The profile an InferenceProfile object read from the cluster holds (no YAML lines to point at)."""
    return loads(json.dumps(obj), source=source)


def to_object(profile: Profile) -> dict[str, object]:
    """``profile`` as an InferenceProfile object: what the file says (not its defaults), under spec."""
    written = profile.model_dump(mode="json", exclude_unset=True)
    metadata: dict[str, object] = {"name": profile.metadata.name, "namespace": profile.metadata.namespace}
    if profile.metadata.labels:
        metadata["labels"] = dict(profile.metadata.labels)
    spec = {k: v for k, v in written.items() if k not in ("apiVersion", "kind", "metadata")}
    return {"apiVersion": RESOURCE_API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _from_resource(doc: strictyaml.Document, source: str) -> strictyaml.Document:
    """An InferenceProfile object (deployctl.dev/v1: metadata, spec) as the profile document it holds,
    each field keeping its line, so every command reads a file and an object alike."""
    data = doc.data
    spec = data.get("spec")
    if data.get("kind") != KIND or not isinstance(spec, dict):
        raise errors.InvalidProfile(
            f"{source}: an object of apiVersion {RESOURCE_API_VERSION} must be kind {KIND} with a spec mapping "
            "(the profile's model, engine, hardware, … sections)"
        )
    taken = sorted(set(spec) & {"apiVersion", "kind", "metadata"})
    if taken:
        raise errors.InvalidProfile(f"{source}: spec.{taken[0]} belongs at the top of the object, not in its spec")
    meta = _mapping(data.get("metadata"))
    labels = _mapping(meta.get("labels"))
    metadata: dict[str, object] = {k: meta[k] for k in ("name", "namespace") if k in meta}
    own = {k: v for k, v in labels.items() if not str(k).startswith(_TOOL_LABEL_PREFIXES)}
    if own:
        metadata["labels"] = own
    profile_data = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, **spec}
    lines: dict[strictyaml.Path, int] = {}
    for path, line in doc.lines.items():
        if path[:1] == ("spec",) and len(path) > 1:
            lines[path[1:]] = line
        elif path[:1] != ("spec",):
            lines[path] = line
    return strictyaml.Document(profile_data, lines)


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}
