"""The pod-level parts a profile may add to the engine container: env, envFrom, volumes and mounts.

Each is a safe subset of the Kubernetes field of the same name, and each is checked against what
deployctl itself puts into the pod (its env variables, its volumes and their mount paths), so a
profile can add to the pod spec but never silently override what another profile field controls.
The checks that need the whole engine section (names declared once, mounts naming a declared
volume) are functions here that orchestrator/profile/engine.py and orchestrator/profile/model.py call.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Annotated, Literal

import pydantic
from pydantic import Field

from orchestrator import engines
from orchestrator.profile import base as profile_base
from orchestrator.profile import compile_cache as profile_compile_cache

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A key of a Secret or ConfigMap (Kubernetes IsConfigMapKey).
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# A resource quantity such as 1Gi or 500M (the emptyDir sizeLimit).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")

# The writable HOME deployctl gives the non-root user (orchestrator/render/manifests.py mounts an emptyDir there).
HOME_DIR = "/home/vllm"
SHM_DIR = "/dev/shm"
# The volumes deployctl adds to every engine pod (manifests/_pod.j2 and the chart's podSpec).
DEPLOYCTL_VOLUMES = ("model", "dshm", "home")
# LeaderWorkerSet injects these into every pod of a group (sigs.k8s.io/lws, pkg/utils/env).
LWS_ENV = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
# The KubeRay operator sets these in a RayCluster's Ray container unless the pod spec already does
# (ray-operator/controllers/ray/utils/constant.go): one of the profile's would win and break the join.
KUBERAY_ENV = (
    *("RAY_CLUSTER_NAME", "RAY_IP", "FQ_RAY_IP", "RAY_PORT", "RAY_ADDRESS", "KUBERAY_GEN_RAY_START_CMD"),
    *("RAY_USAGE_STATS_KUBERAY_IN_USE", "RAY_USAGE_STATS_EXTRA_TAGS", "RAY_CLOUD_INSTANCE_ID", "RAY_NODE_TYPE_NAME"),
    "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE",
)


def _deployctl_env() -> dict[str, str]:
    """Every variable deployctl (or a controller it renders for) sets in the engine container, with
    why and what to do instead: a profile setting one would fight the field that decides it."""
    owners: dict[str, str] = {
        "HOME": f"deployctl points it at {HOME_DIR}, the writable directory of the engine's caches (the pod "
        f"runs as a uid the image does not know); remove it, and mount a volume below {HOME_DIR} to keep a cache",
    }
    for kind in engines.KINDS:
        for name in engines.get(kind).offline_env:
            owners[name] = "airgap.offline decides it; remove it and set airgap.offline instead"
    owners["RAY_USAGE_STATS_ENABLED"] = owners["HF_HUB_OFFLINE"]
    owners["PREFIX_CACHING"] = "engine.enablePrefixCaching decides it (TGI); remove it and set that field instead"
    owners["HF_TOKEN"] = (
        "model.credentialsSecret decides it (the Secret's key `token`); remove it and name the Secret there instead"
    )
    for name in LWS_ENV:
        owners[name] = (
            "the LeaderWorkerSet controller sets it in every pod of a group (placement.groupEngine: lws); remove it"
        )
    for name in KUBERAY_ENV:
        owners[name] = "the KubeRay operator sets it in every pod of a copy (placement.groupEngine: kuberay); remove it"
    return owners


DEPLOYCTL_ENV = _deployctl_env()


def _data_key(v: str) -> str:
    if not _DATA_KEY.match(v):
        raise ValueError(f"{v!r} is not a valid key: use letters, digits, '-', '_' and '.'")
    return v


# A key of a Secret or ConfigMap, checked as the API server would.
DataKey = Annotated[str, pydantic.AfterValidator(_data_key)]


class KeyRef(profile_base.Model):
    name: Annotated[str, profile_base.object_name_of("Secret or ConfigMap name")] = Field(
        description="Name of the Secret or ConfigMap, in the release's namespace."
    )
    key: DataKey = Field(description="The key in it whose value becomes the variable.")
    optional: bool = Field(
        default=False,
        description="Start the pod even when the object or key is missing (the variable is then unset). Off: "
        "the pod waits in CreateContainerConfigError until it exists, which names the problem.",
    )


class EnvValueFrom(profile_base.Model):
    secretKeyRef: KeyRef | None = Field(default=None, description="Take the value from a key of a Secret.")
    configMapKeyRef: KeyRef | None = Field(default=None, description="Take the value from a key of a ConfigMap.")

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> EnvValueFrom:
        if (self.secretKeyRef is None) == (self.configMapKeyRef is None):
            raise ValueError("give exactly one of secretKeyRef or configMapKeyRef, each as {name, key}")
        return self


class EnvVar(profile_base.Model):
    """One variable of `engine.env`; a name deployctl sets itself is refused, naming the field that sets it."""

    name: str = Field(description="Variable name: letters, digits and '_', not starting with a digit.")
    value: str | None = Field(default=None, description="The value, written in the profile (no secrets here).")
    valueFrom: EnvValueFrom | None = Field(
        default=None,
        description="Take the value from a Secret or ConfigMap key; only the object's name and key are stored in "
        "the profile and the release records, never the value.",
    )

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not ENV_NAME.match(v):
            raise ValueError(
                f"{v!r} is not a valid variable name: use letters, digits and '_', not starting with a digit"
            )
        return v

    @pydantic.model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if (self.value is None) == (self.valueFrom is None):
            raise ValueError(
                f"{self.name}: give exactly one of value (a literal) or valueFrom (a Secret or ConfigMap key)"
            )
        return self


class ObjectRef(profile_base.Model):
    name: Annotated[str, profile_base.object_name_of("Secret or ConfigMap name")] = Field(
        description="Name of the Secret or ConfigMap, in the release's namespace."
    )
    optional: bool = Field(default=False, description="Start the pod even when the object is missing.")


class EnvFromSource(profile_base.Model):
    """One entry of `engine.envFrom`: every key of a Secret or ConfigMap as a variable."""

    secretRef: ObjectRef | None = Field(default=None, description="Every key of this Secret becomes a variable.")
    configMapRef: ObjectRef | None = Field(default=None, description="Every key of this ConfigMap becomes a variable.")
    prefix: str = Field(default="", description="Put before every variable name (e.g. `APP_`); empty: none.")

    @pydantic.field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and not ENV_NAME.match(v):
            raise ValueError(f"prefix {v!r} must start a valid variable name: letters, digits and '_'")
        return v

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> EnvFromSource:
        if (self.secretRef is None) == (self.configMapRef is None):
            raise ValueError("give exactly one of secretRef or configMapRef, each as {name}")
        return self


class KeyToPath(profile_base.Model):
    key: DataKey = Field(description="The key of the ConfigMap or Secret.")
    path: str = Field(description="Relative file path the key is written to inside the volume.")

    @pydantic.field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        return _relative_path(v, "path")


def _relative_path(v: str, what: str) -> str:
    if not v or v.startswith("/") or ".." in v.split("/"):
        raise ValueError(f"{what} {v!r} must be a relative path without '..' (e.g. template.jinja)")
    return v


class PvcVolumeSource(profile_base.Model):
    claimName: Annotated[str, profile_base.object_name_of("PersistentVolumeClaim name")] = Field(
        description="Name of the PersistentVolumeClaim, in the release's namespace."
    )
    readOnly: bool = Field(default=False, description="Mount the claim read-only.")


class _KeysAsFiles(profile_base.Model):
    """What a ConfigMap and a Secret volume share: which keys become files, and whether the object may be missing."""

    items: list[KeyToPath] = Field(
        default_factory=list, description="Only these keys, at these paths; empty: every key, named after it."
    )
    optional: bool = Field(default=False, description="Start the pod even when the object is missing.")


class ConfigMapVolumeSource(_KeysAsFiles):
    name: Annotated[str, profile_base.object_name_of("ConfigMap name")] = Field(
        description="Name of the ConfigMap; each key becomes a file."
    )


class SecretVolumeSource(_KeysAsFiles):
    secretName: Annotated[str, profile_base.object_name_of("Secret name")] = Field(
        description="Name of the Secret; each key becomes a file."
    )


class EmptyDirVolumeSource(profile_base.Model):
    medium: Literal["", "Memory"] = Field(
        default="", description="`Memory` for a tmpfs (counts against the pod's memory limit); empty: node disk."
    )
    sizeLimit: str | None = Field(default=None, description="Most the directory may hold, e.g. 10Gi.")

    @pydantic.field_validator("sizeLimit")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        if v is not None and not _QUANTITY.match(v):
            raise ValueError(f"sizeLimit {v!r} is not a quantity such as 512Mi or 10Gi")
        return v


_VOLUME_SOURCES = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")


class Volume(profile_base.Model):
    """One volume of `engine.volumes`: a name and exactly one source; `model`, `dshm`, `home` are taken."""

    name: str = Field(description="Volume name (a DNS-1123 label) that `engine.volumeMounts` refer to.")
    persistentVolumeClaim: PvcVolumeSource | None = Field(default=None, description="A PersistentVolumeClaim.")
    configMap: ConfigMapVolumeSource | None = Field(default=None, description="A ConfigMap's keys as files.")
    secret: SecretVolumeSource | None = Field(default=None, description="A Secret's keys as files.")
    emptyDir: EmptyDirVolumeSource | None = Field(default=None, description="A scratch directory of the pod.")

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        profile_base.dns_label(v, "volume name")
        if v in DEPLOYCTL_VOLUMES:
            raise ValueError(
                f"volume name {v!r} is taken: deployctl adds volumes {', '.join(DEPLOYCTL_VOLUMES)} to every pod "
                "(weights, /dev/shm, HOME); choose another name"
            )
        if v == profile_compile_cache.VOLUME:
            raise ValueError(f"volume name {v!r} is taken: engine.compileCache adds it; choose another name")
        return v

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> Volume:
        given = [s for s in _VOLUME_SOURCES if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError(
                f"volume {self.name!r} has {len(given)} sources ({', '.join(given) or 'none'}); give exactly one "
                f"of {', '.join(_VOLUME_SOURCES)}"
            )
        return self


class VolumeMount(profile_base.Model):
    """One mount of `engine.volumeMounts`, kept off the paths deployctl mounts (weights, /dev/shm, HOME)."""

    name: str = Field(description="The `engine.volumes` entry to mount.")
    mountPath: str = Field(
        description="Absolute, normalised path in the container; not at, above or below the weights' mountPath "
        "or /dev/shm, and not at or above /home/vllm (below it is fine: a cache volume, say)."
    )
    readOnly: bool = Field(default=False, description="Mount read-only.")
    subPath: str | None = Field(default=None, description="Mount only this relative path of the volume.")

    @pydantic.field_validator("mountPath")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or posixpath.normpath(v) != v or v == "/":
            raise ValueError(
                f"mountPath {v!r} must be an absolute, normalised path below / (no trailing '/', '.' or '..'), "
                f"e.g. {posixpath.normpath('/' + v.strip('/')) if v.strip('/') else '/etc/chat-templates'}"
            )
        return v

    @pydantic.field_validator("subPath")
    @classmethod
    def _sub_path(cls, v: str | None) -> str | None:
        return None if v is None else _relative_path(v, "subPath")


def _nested(a: str, b: str) -> bool:
    """True when one path is the other or lies below it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def env_problems(env: Sequence[EnvVar]) -> list[tuple[profile_base.Loc, str]]:
    """Each duplicate name and each name deployctl sets itself, as (path under engine, message)."""
    problems: list[tuple[profile_base.Loc, str]] = []
    seen: dict[str, int] = {}
    for i, var in enumerate(env):
        owner = DEPLOYCTL_ENV.get(var.name)
        if owner is not None:
            problems.append((("env", i, "name"), f"{var.name} is set by deployctl in the engine container: {owner}"))
        if var.name in seen:
            problems.append(
                (("env", i, "name"), f"{var.name} is already set by engine.env[{seen[var.name]}]; keep one of them")
            )
        seen.setdefault(var.name, i)
    return problems


def volume_problems(volumes: Sequence[Volume], mounts: Sequence[VolumeMount]) -> list[tuple[profile_base.Loc, str]]:
    """Duplicate volume names, mounts of undeclared volumes, and mount paths that clash with each other
    or with /dev/shm and HOME (the weights' path needs the model section: see model_mount_problems)."""
    problems: list[tuple[profile_base.Loc, str]] = []
    names: dict[str, int] = {}
    for i, volume in enumerate(volumes):
        if volume.name in names:
            problems.append(
                (
                    ("volumes", i, "name"),
                    f"volume {volume.name!r} is already declared at engine.volumes[{names[volume.name]}]; "
                    "give each volume its own name",
                )
            )
        names.setdefault(volume.name, i)
    paths: dict[str, int] = {}
    for i, mount in enumerate(mounts):
        if mount.name not in names:
            declared = ", ".join(names) or "none"
            problems.append(
                (
                    ("volumeMounts", i, "name"),
                    f"no volume {mount.name!r} in engine.volumes (declared: {declared}); "
                    "declare it there or fix the name",
                )
            )
        path = mount.mountPath
        if _nested(path, SHM_DIR):
            problems.append((("volumeMounts", i, "mountPath"), _clash(path, SHM_DIR, "the /dev/shm NCCL uses")))
        if path == HOME_DIR or HOME_DIR.startswith(path + "/"):
            problems.append(
                (
                    ("volumeMounts", i, "mountPath"),
                    f"{path} would hide {HOME_DIR}, the writable HOME deployctl mounts for the engine's caches; "
                    f"mount below it (e.g. {HOME_DIR}/.cache) or elsewhere",
                )
            )
        if _nested(path, profile_compile_cache.MOUNT_PATH):
            where = _clash(path, profile_compile_cache.MOUNT_PATH, "the compile cache (engine.compileCache)")
            problems.append((("volumeMounts", i, "mountPath"), where))
        if path in paths:
            problems.append(
                (("volumeMounts", i, "mountPath"), f"{path} is already mounted by engine.volumeMounts[{paths[path]}]")
            )
        paths.setdefault(path, i)
    return problems


def model_mount_problems(mounts: Sequence[VolumeMount], model_mount: str) -> list[tuple[profile_base.Loc, str]]:
    """Mounts at, above or below the weights' mount path, which would hide or shadow the weights."""
    return [
        (("volumeMounts", i, "mountPath"), _clash(m.mountPath, model_mount, "the weights (model.source.mountPath)"))
        for i, m in enumerate(mounts)
        if _nested(m.mountPath, model_mount)
    ]


def _clash(path: str, theirs: str, what: str) -> str:
    where = "is" if path == theirs else "lies below" if path.startswith(theirs + "/") else "lies above"
    return f"{path} {where} {theirs}, where deployctl mounts {what}; choose a path outside it, e.g. /etc/extra"
