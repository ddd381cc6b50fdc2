"""`engine.compileCache`: where vLLM keeps what it compiles, so that the next revision reuses it.

Every vLLM start compiles: torch.compile's graphs, Inductor's and Triton's kernels, FlashInfer's JIT
modules. By default all of it lands in the pod's HOME, an emptyDir that dies with the pod, so each
restart and each revision compiles again (a minute or more on a GPU). This section mounts a volume
that outlives the pod, a ReadWriteMany claim or a directory on the node, and points the engine's
cache variables into one directory of it per **cache key**: the image digest, the model, TP/PP and
the engine flags that shape what is compiled (orchestrator/render/compile_cache.py). A restart or
an SLO-only change keeps the key; a new image, model or compile flag gets a fresh directory, so a
stale kernel is never loaded. vLLM hashes its own configuration below that directory as well.

Writable by the pod's uid 1000, which a profile can only promise: a claim through engine.fsGroup
(the kubelet makes the claim's files the group's, where its driver honours fsGroup), a node
directory by its owner (the node's admin creates it once). The profile's side is checked here; the
node's by the warm-up pod on every target node, where the profile has one.
"""

from __future__ import annotations

import posixpath

import pydantic
from pydantic import Field

from orchestrator.profile import base as profile_base

# The volume deployctl adds for it, and where the engine container mounts it.
VOLUME = "compile-cache"
MOUNT_PATH = "/var/cache/deployctl-compile"
# The variables that move each compiler's cache below the key's directory (vLLM's envs.py,
# Triton's TRITON_CACHE_DIR, which vLLM honours when set, and FlashInfer's JIT base directory).
ENV = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")


class CompileCacheSpec(profile_base.Model):
    """Exactly one of `pvc` or `hostPath`."""

    pvc: str | None = Field(
        default=None,
        description="A PersistentVolumeClaim for the cache, shared by every pod of the release: ReadWriteMany "
        "with more than one pod. Needs engine.fsGroup, through which the kubelet lets the pod's uid write it "
        "(NFS and CephFS drivers often ignore fsGroup: chown the claim's top directory to 1000 once).",
        examples=["vllm-compile-cache"],
    )
    hostPath: str | None = Field(
        default=None,
        description="A directory on each GPU node for the cache (node-local, e.g. on NVMe), one per namespace: "
        "what one release compiles there, another's engine loads. It must exist and be writable by uid 1000 "
        "(`install -d -o 1000 -g 1000 PATH` on each node, once); with rollout.warmup, the warm-up checks it on "
        "every target node before a GPU pod starts. Under the controller, an InferencePolicy must list it in "
        "allowedCompileCacheHostPaths.",
        examples=["/var/lib/deployctl/compile-cache"],
    )

    @pydantic.field_validator("pvc")
    @classmethod
    def _claim(cls, v: str | None) -> str | None:
        return None if v is None else profile_base.object_name(v, "PersistentVolumeClaim name")

    @pydantic.field_validator("hostPath")
    @classmethod
    def _host_path(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or posixpath.normpath(v) != v or v == "/"):
            raise ValueError(f"hostPath {v!r} must be an absolute, normalised directory below /")
        return v

    @pydantic.model_validator(mode="after")
    def _one_place(self) -> CompileCacheSpec:
        if (self.pvc is None) == (self.hostPath is None):
            raise ValueError("give exactly one of pvc (a ReadWriteMany claim) or hostPath (a directory on each node)")
        return self

    def volume(self) -> dict[str, object]:
        """The pod volume, as Kubernetes takes it."""
        if self.pvc is not None:
            return {"name": VOLUME, "persistentVolumeClaim": {"claimName": self.pvc}}
        # Directory, not DirectoryOrCreate: the kubelet would create it owned by root, which uid 1000 cannot write.
        return {"name": VOLUME, "hostPath": {"path": self.hostPath, "type": "Directory"}}


def problems(
    cache: CompileCacheSpec, *, kind: str, title: str, pinned: bool, fs_group: int | None, env_names: list[str]
) -> list[tuple[profile_base.Loc, str]]:
    """What keeps ``cache`` from working for this engine section, as (path under engine, message)."""
    if kind != "vllm":
        return [(("compileCache",), f"compileCache moves vLLM's compile caches; {title} has none that deployctl sets")]
    found: list[tuple[profile_base.Loc, str]] = []
    if not pinned:
        found.append(
            (
                ("compileCache",),
                "compileCache is keyed by the image's digest, and a tag can move to other bytes (a stale kernel "
                "would be loaded): pin engine.image by digest, or remove compileCache",
            )
        )
    if cache.pvc is not None and fs_group is None:
        found.append(
            (
                ("compileCache", "pvc"),
                f"the engine runs as uid 1000, and the kubelet makes claim {cache.pvc!r} writable for it only "
                "through a group: set engine.fsGroup (e.g. 1000) so the pod can write its compile cache",
            )
        )
    for i, name in enumerate(env_names):
        if name in ENV:
            found.append((("env", i, "name"), f"{name} is set by engine.compileCache here; remove it from env"))
    return found
