"""The warm-up's pods and what their reports mean (rollout.warmup, model.verify); pure, no cluster calls.

Where: every eligible node a new engine pod can land on, the GPUs this release frees there or the
free ones (preflight's node reports). What: one pod per node, pinned there by ``nodeName``, built
from the release's own rendered pod template (the image, its pull Secrets, the pod's uid and security
settings, the weights' volume and the compile cache's, the tolerations), so it can reach nothing the
engine pod could not; no GPU, no Secret, no service account token, no environment. It runs
orchestrator/data/warmup_read.py with Python from the engine image and prints one report line.
No memory limit: the page cache its reads fill is charged to its cgroup, and a limit below the
weights' size would evict the first shards before the engine reads them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import importlib.resources
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator import conventions
from orchestrator.kube import status as kube_status
from orchestrator.plan import preflight
from orchestrator.profile import compile_cache as profile_compile_cache
from orchestrator.profile.model import Profile
from orchestrator.records import encoding, model_manifest

LABEL = "deployctl.dev/warmup"  # value: the release; no selector of the release's objects matches it
CONTAINER = "warmup"
REPORT = "deployctl-warmup: "
SCRIPT = (importlib.resources.files("orchestrator") / "data" / "warmup_read.py").read_text(encoding="utf-8")
# Not part of the model on either side: a clone's .git holds every blob twice, and the script skips it.
IGNORED = (".git",)
_KEPT_VOLUMES = ("model", profile_compile_cache.VOLUME)
_NO_SIDECAR = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
_TEXT_SHOWN = 300  # characters of one error from the pod, in a message or the record
_LOG_LIMIT = 32 << 20  # a 10,000-file model's report is about 1 MiB


def targets(verdict: preflight.Preflight, gpus_per_pod: int) -> list[str]:
    """The eligible nodes where a new engine pod can land: this release's GPUs there, once freed, or free ones."""
    return [n.name for n in verdict.nodes if n.eligible and n.gpus_free + n.gpus_release >= gpus_per_pod]


def pod_template(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The release's engine pod template: a Deployment's, a RayCluster head's, a LeaderWorkerSet leader's."""
    for obj in objects:
        spec = kube_status.mapping(obj.get("spec"))
        if obj.get("kind") == "Deployment":
            return kube_status.mapping(spec.get("template"))
        if obj.get("kind") == "RayCluster":
            return kube_status.mapping(kube_status.mapping(spec.get("headGroupSpec")).get("template"))
        if obj.get("kind") == "LeaderWorkerSet":
            lws = kube_status.mapping(spec.get("leaderWorkerTemplate"))
            return kube_status.mapping(lws.get("leaderTemplate") or lws.get("workerTemplate"))
    raise ValueError("the rendered release has no engine pod template")  # render always gives one


def pod_name(release: str, node: str) -> str:
    """One warm-up pod per node: the release (cut) and a hash of the whole release name and the node's,
    so two releases whose names share their first 40 characters never share a pod name."""
    return f"{release[:40]}-warmup-{hashlib.sha256(f'{release}/{node}'.encode()).hexdigest()[:10]}"


def network_policy(profile: Profile) -> dict[str, Any]:
    """Deny every connection to and from the warm-up pods: the script reads a volume and prints, and
    code the image runs on start (a sitecustomize, a wrapper) must not reach out past airgap.denyEgress."""
    name, namespace = profile.metadata.name, profile.metadata.namespace
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{name[:40]}-warmup-deny-all",
            "namespace": namespace,
            "labels": {LABEL: name, conventions.MANAGED_BY_LABEL: conventions.MANAGED_BY},
        },
        "spec": {"podSelector": {"matchLabels": {LABEL: name}}, "policyTypes": ["Ingress", "Egress"]},
    }


def _annotations(template: Mapping[str, Any], engine: str) -> dict[str, str]:
    """The template's annotations for the warm-up pod: a container-scoped one (AppArmor's) follows the
    container to its new name, and service meshes are told not to inject a sidecar, which would keep
    the pod running after the warm-up ended."""
    found = kube_status.mapping(kube_status.mapping(template.get("metadata")).get("annotations"))
    out: dict[str, str] = {}
    for key, value in found.items():
        prefix, _, container = str(key).rpartition("/")
        out[f"{prefix}/{CONTAINER}" if prefix.startswith("container.") and container == engine else str(key)] = str(
            value
        )
    return {**out, **_NO_SIDECAR}


def pod(profile: Profile, template: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The warm-up pod for ``node``, from the release's rendered pod ``template``."""
    spec = kube_status.mapping(template.get("spec"))
    engine = next(iter(kube_status.mappings(spec.get("containers"))), {})
    volumes = [dict(v) for v in kube_status.mappings(spec.get("volumes")) if v.get("name") in _KEPT_VOLUMES]
    mounts = [m for m in kube_status.mappings(engine.get("volumeMounts")) if m.get("name") in _KEPT_VOLUMES]
    verify = profile.model.verify
    args = [
        profile.server_settings().model_path,
        verify.manifest if verify else "",
        "1" if verify else "0",
        profile_compile_cache.MOUNT_PATH if profile.engine.compileCache else "",
    ]
    warmup = profile.rollout.warmup
    assert warmup is not None, "the warm-up runs only when rollout.warmup is set"
    name, namespace = profile.metadata.name, profile.metadata.namespace
    annotations = _annotations(template, kube_status.text(engine.get("name")))
    runtime = {"runtimeClassName": spec["runtimeClassName"]} if spec.get("runtimeClassName") else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, node),
            "namespace": namespace,
            "labels": {LABEL: name, conventions.MANAGED_BY_LABEL: conventions.MANAGED_BY},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,  # exactly the target node, past the scheduler: it asks for no GPU
            "restartPolicy": "Never",
            "activeDeadlineSeconds": warmup.timeoutSeconds,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": spec.get("securityContext") or {},
            "imagePullSecrets": spec.get("imagePullSecrets") or [],
            "tolerations": spec.get("tolerations") or [],
            **runtime,  # the same sandbox (gVisor, Kata) as the engine, where the release names one
            "volumes": volumes,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": engine.get("image"),
                    "imagePullPolicy": engine.get("imagePullPolicy") or "IfNotPresent",
                    "command": ["python3", "-c", SCRIPT],
                    "args": args,
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                    "securityContext": engine.get("securityContext") or {},
                    "volumeMounts": [
                        {**m, "readOnly": m.get("name") == "model" or m.get("readOnly", False)} for m in mounts
                    ],
                }
            ],
        },
    }


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """One node's warm-up: ``state`` done, failed or timed_out; what it read; what the checks found."""

    node: str
    state: str
    reason: str | None = None  # why it failed, one sentence
    seconds: float | None = None
    bytes: int | None = None
    files: int | None = None
    cache_error: str | None = None  # the compile cache directory is not writable by the pod's uid
    check: model_manifest.WeightsCheck | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "state": self.state,
            "reason": self.reason,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "files": self.files,
            "cache_error": self.cache_error,
            "verification": self.check.to_json() if self.check else None,
        }


def judge(profile: Profile, node: str, pod_obj: Mapping[str, Any] | None, log: str) -> NodeResult:
    """What one node's warm-up pod (its last state, its log) says."""
    if pod_obj is None:
        return NodeResult(node, "failed", "its pod was deleted before it finished")
    status = kube_status.mapping(pod_obj.get("status"))
    phase = ended(pod_obj)
    if status.get("reason") == "DeadlineExceeded":
        limit = profile.rollout.warmup.timeoutSeconds if profile.rollout.warmup else 0
        return NodeResult(node, "timed_out", f"it did not finish within rollout.warmup.timeoutSeconds ({limit} s)")
    if phase == "Failed":
        return NodeResult(node, "failed", _why_failed(status))
    if phase != "Succeeded":
        still = kube_status.text(status.get("phase"), "Pending")
        return NodeResult(node, "timed_out", f"it was still {still}{_waiting(status)}, past its deadline")
    report = _report(log)
    if report is None:
        return NodeResult(node, "failed", "its log holds no warm-up report (an image without python3?)")
    return _from_report(profile, node, report)


def ended(pod_obj: Mapping[str, Any]) -> str | None:
    """Succeeded or Failed once the warm-up container ended (a sidecar may keep the pod running), else None."""
    status = kube_status.mapping(pod_obj.get("status"))
    for c in kube_status.mappings(status.get("containerStatuses")):
        done = kube_status.mapping(kube_status.mapping(c.get("state")).get("terminated"))
        if c.get("name") == CONTAINER and done:
            return "Succeeded" if done.get("exitCode") == 0 else "Failed"
    phase = status.get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def _from_report(profile: Profile, node: str, report: Mapping[str, Any]) -> NodeResult:
    files = kube_status.mapping(report.get("files"))
    raw = report.get("errors")
    errors = [_clean(e) for e in raw[:3]] if isinstance(raw, list) else ([] if raw is None else ["a garbled report"])
    cache = kube_status.mapping(report.get("cache"))
    cache_error = None
    if cache and cache.get("writable") is not True:
        cache_error = f"{_clean(cache.get('path'))} is not writable by uid 1000: {_clean(cache.get('error'))}"
    size = report.get("bytes")
    return NodeResult(
        node,
        "failed" if errors else "done",
        "; ".join(errors) or None,
        encoding.seconds(report.get("seconds")),
        size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        len(files),
        cache_error,
        # A file the pod could not read is a read error, not a tampered volume: judged only on a clean read.
        None if errors else _check(profile, files, report.get("manifest")),
    )


def _clean(value: object) -> str:
    """Text from the pod (a file name, an OS error) as a message or the record may hold it: printable, short."""
    return model_manifest.printable(value if isinstance(value, str) else repr(value), _TEXT_SHOWN)


def _check(profile: Profile, files: Mapping[str, object], manifest: object) -> model_manifest.WeightsCheck | None:
    verify = profile.model.verify
    if verify is None:
        return None
    digests = {str(k): v for k, v in files.items() if isinstance(v, str)}
    data: bytes | None = None
    if isinstance(manifest, str):
        try:
            data = base64.b64decode(manifest, validate=True)
        except (binascii.Error, ValueError):
            data = b""
    if verify.signature is not None and verify.publicKey is not None:
        return model_manifest.check_signature(
            data, verify.publicKey.encode(), digests, name=verify.signature, ignore=IGNORED
        )
    return model_manifest.check_sha256(data, digests, name=verify.manifest, ignore=IGNORED)


def _report(log: str) -> Mapping[str, Any] | None:
    for line in reversed(log[-_LOG_LIMIT:].splitlines()):
        if line.startswith(REPORT) or f" {REPORT}" in line:  # a runtime may prefix a timestamp
            try:
                found = json.loads(line.split(REPORT, 1)[1])
            except (ValueError, RecursionError):  # a garbled or hostile report: judged as none
                return None
            return found if isinstance(found, dict) else None
    return None


def volume_trouble(events: Sequence[Mapping[str, Any]], cache_dir: str | None) -> Callable[[str], NodeResult] | None:
    """What a waiting warm-up pod's events say about its volumes, as a judgement for its node; None when
    they say nothing that would not pass. A ReadWriteOnce claim attaches to one node at a time: an engine
    pod on another node could not mount it either, which is worth knowing before the swap."""
    for event in events:
        reason, message = event.get("reason"), _clean(event.get("message"))
        if reason == "FailedAttachVolume" and "Multi-Attach" in message:
            why = (
                f"its volumes cannot be attached here: {message}. A ReadWriteOnce claim is attached to one node "
                "at a time, so engine pods on other nodes could not mount it either: give the weights a "
                "ReadOnlyMany or ReadWriteMany claim, or keep the release on the node that holds it"
            )
            return lambda node: NodeResult(node, "failed", why)
        if reason == "FailedMount" and "hostPath type check failed" in message:
            if cache_dir is not None and cache_dir in message:
                missing = f"the node directory is missing ({message})"
                return lambda node: NodeResult(node, "failed", missing, cache_error=missing)
            return lambda node: NodeResult(node, "failed", f"its volumes cannot be mounted here: {message}")
    return None


def _why_failed(status: Mapping[str, Any]) -> str:
    for c in kube_status.mappings(status.get("containerStatuses")):
        done = kube_status.mapping(kube_status.mapping(c.get("state")).get("terminated"))
        if done and c.get("name") in (CONTAINER, None):
            code, reason = _clean(done.get("exitCode")), _clean(done.get("reason") or "Error")
            return f"its container ended with exit code {code} ({reason})"
    return f"its pod failed ({_clean(status.get('reason') or status.get('message') or 'no reason given')})"


def _waiting(status: Mapping[str, Any]) -> str:
    for c in kube_status.mappings(status.get("containerStatuses")):
        waiting = kube_status.mapping(kube_status.mapping(c.get("state")).get("waiting"))
        if waiting.get("reason"):
            return f" ({_clean(waiting['reason'])}: {_clean(waiting.get('message') or '')})"
    return ""
