"""The profile's `engine` section: the serving engine, its image and the parameters it is started with.

orchestrator/profile/model.py assembles it into the InferenceProfile; every field becomes the chosen
engine's own flag (orchestrator/engines) or a part of the pod spec (orchestrator/render/manifests.py).
"""

from __future__ import annotations

from typing import Literal

import pydantic
from pydantic import Field

from orchestrator import engines
from orchestrator.engines import vllm_flags, vllm_loaders
from orchestrator.profile import base as profile_base
from orchestrator.profile import compile_cache as profile_compile_cache
from orchestrator.profile import pod as profile_pod

DEFAULT_VLLM_VERSION = engines.VLLM.default_version
KV_MEMORY_FLAG = "--kv-cache-memory-bytes"  # vLLM's KV cache size, which skips its memory profiling


class StreamerSpec(profile_base.Model):
    """The Run:ai Model Streamer's settings (vLLM's runai_streamer_loader.py reads these keys)."""

    concurrency: int | None = Field(
        default=None, ge=1, le=1024, description="Threads reading the weights. Unset: the streamer's default (16)."
    )
    memoryLimitBytes: int | None = Field(
        default=None,
        ge=-1,
        description="CPU memory the streamer may buffer, in bytes; -1: unlimited. Unset: the streamer's default.",
    )


class EngineSpec(profile_base.Model):
    kind: Literal["vllm", "tgi", "trtllm", "sglang"] = Field(
        default="vllm",
        description="The serving engine: `vllm` (vLLM), `tgi` (Hugging Face Text Generation Inference), "
        "`trtllm` (TensorRT-LLM's `trtllm-serve`, PyTorch backend) or `sglang` (SGLang). Every field below "
        "becomes that engine's own flag (docs/engines.md); one it cannot honour is refused by name.",
    )
    image: str = Field(
        description="The engine's OpenAI-compatible server image from your own registry, pinned by digest "
        "(`…@sha256:<64 hex>`) so every replica and every rollback runs the same bytes.",
        examples=["registry.internal/vllm/vllm-openai@sha256:" + "0" * 64],
    )
    allowUnpinnedImage: bool = Field(
        default=False,
        description="Accept an image by tag instead of digest (development only: a tag can move under you).",
    )
    vllmVersion: str = Field(
        default=DEFAULT_VLLM_VERSION,
        description="vLLM version inside the image (kind vllm); selects the flag set `extraArgs` is checked "
        "against. `version` says the same for any engine.",
    )
    version: str | None = Field(
        default=None,
        description="The engine's version inside the image; selects the flag set `extraArgs` is checked against. "
        "Unset: `vllmVersion` for vLLM, else the newest version deployctl has a flag table for.",
        examples=["0.5.6"],
    )
    tensorParallelSize: int = Field(
        default=1,
        ge=1,
        le=64,
        description="GPUs one model copy is split across (vLLM `--tensor-parallel-size`).",
    )
    pipelineParallelSize: int = Field(
        default=1, ge=1, le=64, description="Pipeline stages (vLLM `--pipeline-parallel-size`); 1 = none."
    )
    maxModelLen: int = Field(
        ge=16,
        le=10_485_760,
        description="Longest sequence (prompt + output) in tokens (`--max-model-len`); sizes the KV cache a "
        "single request may need.",
        examples=[8192],
    )
    maxNumSeqs: int = Field(
        default=256,
        ge=1,
        le=65_536,
        description="Most sequences decoded at once (`--max-num-seqs`). deployctl always passes it, so vLLM's "
        "own GPU-dependent default never applies; the planner warns when full-context KV cannot hold this many.",
    )
    maxNumBatchedTokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens per scheduler step (`--max-num-batched-tokens`); bounds the activation peak. "
        "Unset: vLLM's default for the version.",
    )
    kvCacheDtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto",
        description="KV cache data type (`--kv-cache-dtype`); fp8 halves KV memory per token versus 16-bit.",
    )
    gpuMemoryUtilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Share of each GPU's memory (as CUDA reports it) vLLM may use (`--gpu-memory-utilization`); "
        "`deployctl plan` sizes the KV cache from it. deployctl always passes it, so vLLM's own default never "
        "applies (in vLLM 0.33, 0.92 is vLLM's default); deployctl's 0.9 leaves a tenth of each GPU for memory "
        "outside vLLM's budget (another process on the GPU, say).",
    )
    allowCrossNodeTP: bool = Field(
        default=False,
        description="Accept a layout whose tensor-parallel group spans nodes. Off: the planner refuses it when "
        "pipeline stages across nodes would do, because tensor parallelism all-reduces every layer's "
        "activations, which the network between nodes is 10-20x too slow for (docs/multinode.md).",
    )
    enablePrefixCaching: bool = Field(default=True, description="Reuse KV blocks of shared prompt prefixes.")
    extraArgs: list[str] = Field(
        default_factory=list,
        description="Further vLLM flags, checked against the flag list of `vllmVersion` so a misspelt flag "
        "fails validation rather than the pod.",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Port the OpenAI-compatible server listens on.")
    cpu: str = Field(default="8", description="CPU request per pod (tokenization and scheduling run on CPU).")
    memory: str = Field(default="64Gi", description="Memory request and limit per pod (host RAM, not VRAM).")
    shmSize: str | None = Field(
        default=None,
        description="Size of the /dev/shm memory volume NCCL uses between GPUs. Unset: 16Gi with more than one "
        "GPU per pod, else 1Gi.",
    )
    startupSeconds: int | None = Field(
        default=None,
        ge=30,
        description="How long the pod may take to load the model before it is restarted. Unset: derived from "
        "the weights' size (minutes for 70B).",
    )
    # The two below are left out of dumps when unset, so profiles written before them keep their
    # content hash (and their pods their template) across a deployctl upgrade.
    loadFormat: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="How vLLM reads the weights (`--load-format`): `safetensors`, `runai_streamer` (the Run:ai "
        "Model Streamer: the image must hold its package, `vllm[runai]`), `fastsafetensors`, … checked against "
        "the load formats of `vllmVersion`. Unset: vLLM's default, `auto` (docs/time-to-serving.md#load-formats).",
        examples=["runai_streamer"],
    )
    skipMemoryProfiling: bool | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Start vLLM with `--kv-cache-memory-bytes` from a calibration (the KV cache a running vLLM of "
        "the same model, GPU, vLLM version, TP and PP allocated) instead of measuring it in a profiling run. "
        "`apply` takes the calibration from the release's live revision; without one it is refused (exit 2). "
        "Unset or false: vLLM profiles as usual (docs/time-to-serving.md#skip-memory-profiling).",
    )
    loadStreamer: StreamerSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The Run:ai streamer's settings (`--model-loader-extra-config`), with loadFormat "
        "`runai_streamer` or `runai_streamer_sharded`.",
    )
    compileCache: profile_compile_cache.CompileCacheSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Keep vLLM's compile caches (torch.compile, Triton, FlashInfer) on a ReadWriteMany claim or a "
        "node directory, one directory per image digest, model, TP/PP and compile flags, so a restart or an "
        "SLO-only change reuses them and any real change compiles afresh. Unset: the pod's HOME, lost with the pod "
        "(docs/time-to-serving.md#compile-cache).",
    )
    imagePullSecrets: list[str] = Field(
        default_factory=list,
        description="Names of Secrets for the internal registry (only names are stored).",
    )
    env: list[profile_pod.EnvVar] = Field(
        default_factory=list,
        description="Extra environment variables of the engine container, each `{name, value}` or `{name, "
        "valueFrom: {secretKeyRef|configMapKeyRef: {name, key, optional}}}`; e.g. `VLLM_API_KEY` from a Secret, "
        "so the server wants a key without the key being in the profile or the release records. Names deployctl "
        "sets itself (HOME, HF_TOKEN, the air-gap switches, …) are refused with the field that controls them.",
    )
    envFrom: list[profile_pod.EnvFromSource] = Field(
        default_factory=list,
        description="Secrets or ConfigMaps whose every key becomes a variable, `{secretRef|configMapRef: {name, "
        "optional}, prefix}`. A variable deployctl or `env` sets wins over one of the same name from here "
        "(Kubernetes' rule).",
    )
    volumes: list[profile_pod.Volume] = Field(
        default_factory=list,
        description="Extra volumes of the engine pod, each a name and exactly one of `persistentVolumeClaim "
        "{claimName, readOnly}`, `configMap {name, items, optional}`, `secret {secretName, items, optional}` or "
        "`emptyDir {medium, sizeLimit}` (e.g. a chat template from a ConfigMap). Names `model`, `dshm` and "
        "`home` are deployctl's.",
    )
    volumeMounts: list[profile_pod.VolumeMount] = Field(
        default_factory=list,
        description="Where the engine container mounts `volumes`: `{name, mountPath, readOnly, subPath}`. A path "
        "at, above or below the weights' mountPath or /dev/shm is refused, as it would hide them.",
    )
    fsGroup: int | None = Field(
        default=None,
        ge=0,
        le=2_147_483_647,
        description="Group id (pod `securityContext.fsGroup`) the kubelet gives the files of the pod's writable "
        "volumes and adds to the container's groups. Set it when a PVC's files belong to another uid than the "
        "pod's 1000 (written by a copy job, say) and are only group-readable or group-writable. Unset: none.",
    )
    fsGroupChangePolicy: Literal["OnRootMismatch", "Always"] | None = Field(
        default=None,
        description="When the kubelet re-owns a volume's files for fsGroup (pod `securityContext."
        "fsGroupChangePolicy`). `OnRootMismatch` walks a volume only when its top directory's owner or mode is "
        "off, so a multi-GB model volume is not chowned file by file at every pod start (minutes on a network "
        "file system); `Always` walks it every time. Unset: `OnRootMismatch`. Only with fsGroup.",
    )

    @pydantic.field_validator("extraArgs")
    @classmethod
    def _known_flags(cls, v: list[str], info: pydantic.ValidationInfo) -> list[str]:
        if not v:
            return v
        secret = next((a for a in v if vllm_flags.normalize(a) == "--api-key"), None)  # also --api_key
        if secret is not None:
            raise ValueError(
                "--api-key in extraArgs would put a secret into the profile and the release records; vLLM reads the "
                "same key from VLLM_API_KEY: set it from a Secret with engine.env (valueFrom.secretKeyRef) and name "
                "that Secret in gate.apiKeySecret so the gate sends the key (profiles/prod-tp4-api-key.yaml does "
                "both; docs/airgap.md)"
            )
        if "kind" not in info.data:
            return v  # the kind is invalid, and says so itself
        engine = engines.get(info.data["kind"])
        version = _engine_version(engine, info.data.get("version"), info.data.get("vllmVersion"))
        known = engine.versions()
        if version not in known:
            how = (
                vllm_flags.how_to_add(version)
                if engine.kind == "vllm"
                else f"generate one with scripts/gen_engine_flags.py {engine.kind} {version}"
            )
            raise ValueError(
                f"cannot check extraArgs: deployctl has no flag list for {engine.title} {version} (known: "
                f"{', '.join(known)}); {how}"
            )
        problems = engine.check_extra_args(v, version)
        if problems:
            raise ValueError("; ".join(f"[{p.index}] {p.arg!r}: {p.message}" for p in problems))
        return v

    @pydantic.model_validator(mode="after")
    def _version_of_this_engine(self) -> EngineSpec:
        if self.kind != "vllm" and "vllmVersion" in self.model_fields_set:
            raise ValueError(f"vllmVersion is vLLM's; for kind {self.kind} write engine.version")
        both = self.version is not None and "vllmVersion" in self.model_fields_set
        if self.kind == "vllm" and both and self.version != self.vllmVersion:
            raise ValueError(f"version {self.version} and vllmVersion {self.vllmVersion} disagree; write one of them")
        return self

    @pydantic.model_validator(mode="after")
    def _load_format(self) -> EngineSpec:
        if self.loadFormat is None:
            if self.loadStreamer is not None:
                raise profile_base.field_error(
                    ("loadStreamer",), "loadStreamer needs loadFormat runai_streamer or runai_streamer_sharded"
                )
            return self
        if self.kind != "vllm":
            raise profile_base.field_error(
                ("loadFormat",), f"loadFormat is vLLM's --load-format; {self.engine.title} has none that deployctl sets"
            )
        if (problem := vllm_loaders.problem(self.loadFormat, self.engine_version)) is not None:
            raise profile_base.field_error(("loadFormat",), problem)
        if self.loadStreamer is not None and self.loadFormat not in vllm_loaders.STREAMER_FORMATS:
            raise profile_base.field_error(
                ("loadStreamer",),
                f"loadStreamer sets the Run:ai streamer; loadFormat {self.loadFormat!r} does not use it",
            )
        twice = [f for f in ("--load-format", "--model-loader-extra-config") if vllm_flags.has_flag(self.extraArgs, f)]
        if twice:
            raise profile_base.field_error(
                ("extraArgs",), f"{twice[0]} is set by engine.loadFormat here: remove it from extraArgs"
            )
        return self

    @pydantic.model_validator(mode="after")
    def _memory_profiling(self) -> EngineSpec:
        if not self.skipMemoryProfiling:
            return self
        if self.kind != "vllm":
            raise profile_base.field_error(
                ("skipMemoryProfiling",),
                f"skipMemoryProfiling renders vLLM's --kv-cache-memory-bytes; {self.engine.title} has no such flag",
            )
        version = self.engine_version
        if version in vllm_flags.known_versions() and KV_MEMORY_FLAG not in vllm_flags.flag_set(version).flags:
            having = [v for v in vllm_flags.known_versions() if KV_MEMORY_FLAG in vllm_flags.flag_set(v).flags]
            raise profile_base.field_error(
                ("skipMemoryProfiling",), f"vLLM {version} has no {KV_MEMORY_FLAG}; vLLM {', '.join(having)} has it"
            )
        if vllm_flags.has_flag(self.extraArgs, KV_MEMORY_FLAG):
            raise profile_base.field_error(
                ("extraArgs",), f"{KV_MEMORY_FLAG} is set by engine.skipMemoryProfiling here: remove it from extraArgs"
            )
        return self

    @property
    def loader_config(self) -> str | None:
        """The ``--model-loader-extra-config`` JSON of loadStreamer, or None."""
        s = self.loadStreamer
        return vllm_loaders.streamer_config(s.concurrency, s.memoryLimitBytes) if s is not None else None

    @property
    def engine(self) -> engines.Engine:
        """The serving engine this section configures."""
        return engines.get(self.kind)

    @property
    def engine_version(self) -> str:
        """The engine's version in the image: `version`, else vllmVersion (vLLM), else the newest table's."""
        return _engine_version(self.engine, self.version, self.vllmVersion)

    @pydantic.model_validator(mode="after")
    def _pod_parts(self) -> EngineSpec:
        problems = profile_pod.env_problems(self.env) + profile_pod.volume_problems(self.volumes, self.volumeMounts)
        if problems:
            raise profile_base.field_error(*problems[0])
        if self.compileCache is not None:
            cache_problems = profile_compile_cache.problems(
                self.compileCache,
                kind=self.kind,
                title=self.engine.title,
                pinned=bool(profile_base.DIGEST.search(self.image)),
                fs_group=self.fsGroup,
                env_names=[v.name for v in self.env],
            )
            if cache_problems:
                raise profile_base.field_error(*cache_problems[0])
        if self.fsGroupChangePolicy is not None and self.fsGroup is None:
            raise profile_base.field_error(
                ("fsGroupChangePolicy",),
                "fsGroupChangePolicy applies only with engine.fsGroup; set engine.fsGroup (the group id that "
                "should own the volumes' files) or remove fsGroupChangePolicy",
            )
        return self

    @pydantic.model_validator(mode="after")
    def _pinned_image(self) -> EngineSpec:
        if not self.allowUnpinnedImage and not profile_base.DIGEST.search(self.image):
            raise ValueError(
                f"image {self.image!r} is not pinned by digest: write it as …@sha256:<64 hex digits> "
                "(e.g. from `crane digest` or your registry), or set engine.allowUnpinnedImage: true for development"
            )
        return self


def _engine_version(engine: engines.Engine, version: str | None, vllm_version: str | None) -> str:
    if version is not None:
        return version
    if engine.kind == "vllm":
        return vllm_version or DEFAULT_VLLM_VERSION
    return engine.default_version
