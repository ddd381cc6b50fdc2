"""The warm-up before the swap: start a pod on each target node, await them, judge, and leave nothing.

``start`` creates the pods (orchestrator/apply/warmup_pods.py) while the old revision still serves.
``Warmup.wait`` awaits them: all of them before a rollout that starts every new pod at once; only the
first before a one-at-a-time rollout, whose later nodes go on warming while the first new pod starts
(the rest are awaited before the revision is recorded). ``Warmup.failure`` says whether to stop: a
weights mismatch and a compile cache the pod cannot write always stop, since the engine would load
the wrong bytes or fail to start there; a warm-up that failed or timed out stops or only warns, as
rollout.warmup.onFailure says. ``Warmup.cleanup`` deletes every warm-up pod on every exit path, and
an apply never needs a warm-up to roll back: a rollback restores pods that ran before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator import errors
from orchestrator.apply import warmup_pods
from orchestrator.apply.outcome import Failure
from orchestrator.kube import Kube
from orchestrator.plan import preflight
from orchestrator.profile.model import Profile
from orchestrator.records import signing

POLL_SECONDS = 1.0
# The kubelet enforces activeDeadlineSeconds on its own sync loop: give it this long past the deadline.
DEADLINE_GRACE_SECONDS = 30.0
CLEANUP_SECONDS = 30.0
Report = Callable[[str, str], None]


@dataclasses.dataclass
class Warmup:
    """Warm-up pods started on ``pods`` (node → pod name) and what each one's report said."""

    kube: Kube
    profile: Profile
    pods: dict[str, str]
    deadline: float  # monotonic
    started: float = dataclasses.field(default_factory=time.monotonic)
    results: dict[str, warmup_pods.NodeResult] = dataclasses.field(default_factory=dict)

    def wait(self, report: Report, *, first: bool = False) -> None:
        """Await every pod (or, ``first``, the first to finish), judging each as it ends."""
        namespace = self.profile.metadata.namespace
        while len(self.results) < len(self.pods) and not (first and self.results):
            live = self._pods()
            for node, name in self.pods.items():
                pod = live.get(name)
                phase = (pod or {}).get("status", {}).get("phase")
                if node in self.results or (pod is not None and phase not in ("Succeeded", "Failed")):
                    continue
                log = self._log(name, namespace) if phase == "Succeeded" else ""
                self._judged(warmup_pods.judge(self.profile, node, pod, log), report)
            if time.monotonic() > self.deadline:
                for node, name in self.pods.items():
                    if node not in self.results:
                        self._judged(warmup_pods.judge(self.profile, node, live.get(name, {}), ""), report)
                return
            if len(self.results) < len(self.pods) and not (first and self.results):
                time.sleep(POLL_SECONDS)

    def failure(self) -> tuple[Failure | None, list[str]]:
        """The failure that stops the rollout (None: go on) and the warnings to give, from the results so far."""
        done = list(self.results.values())
        mismatched = [r for r in done if r.check is not None and not r.check.verified]
        if mismatched:
            r = mismatched[0]
            assert r.check is not None
            message = f"the weights on node {r.node} are not the ones model.verify names: {r.check.explain()}"
            return Failure("weights_mismatch", message + " No GPU pod was started from them.", "warmup"), []
        unwritable = [r for r in done if r.cache_error]
        if unwritable:
            r = unwritable[0]
            path = self.profile.engine.compileCache.hostPath if self.profile.engine.compileCache else None
            fix = (
                f"on the node, run `install -d -o 1000 -g 1000 {path}`"
                if path
                else "set engine.fsGroup to a group the claim's files may be written by"
            )
            message = f"the compile cache on node {r.node}: {r.cache_error}; the engine could not write it there: {fix}"
            return Failure("cache_not_writable", message, "warmup"), []
        failed = [r for r in done if r.state != "done"]
        if not failed:
            return None, []
        said = "; ".join(f"node {r.node}: {r.reason}" for r in failed[:3])
        policy = self.profile.rollout.warmup.onFailure if self.profile.rollout.warmup else "stop"
        if policy == "stop":
            message = f"the warm-up failed ({said}); rollout.warmup.onFailure is stop, so no GPU pod was started"
            return Failure("warmup_failed", message, "warmup"), []
        return None, [f"the warm-up failed and the rollout goes on unwarmed (rollout.warmup.onFailure): {said}"]

    def to_json(self) -> dict[str, object]:
        """The warm-up for the release record: its nodes, what each read and what its checks found."""
        return {
            "seconds": round(time.monotonic() - self.started, 3),
            "nodes": [self.results[n].to_json() for n in sorted(self.results)],
            "pending": sorted(n for n in self.pods if n not in self.results),
        }

    def cleanup(self) -> list[str]:
        """Delete every warm-up pod and wait until they are gone; the names still there after CLEANUP_SECONDS."""
        namespace = self.profile.metadata.namespace
        for name in self.pods.values():
            with contextlib.suppress(errors.ClusterError):  # what is not deleted is listed below as left behind
                self.kube.delete("Pod", name, namespace)
        deadline = time.monotonic() + CLEANUP_SECONDS
        while (left := sorted(set(self.pods.values()) & set(self._pods()))) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        return left

    def _pods(self) -> dict[str, dict[str, Any]]:
        selector = f"{warmup_pods.LABEL}={self.profile.metadata.name}"
        try:
            items, _ = self.kube.list("Pod", self.profile.metadata.namespace, labels=selector)
        except errors.ClusterError:
            return {name: {"status": {"phase": "Pending"}} for name in self.pods.values()}  # read again next poll
        return {i["metadata"]["name"]: i for i in items}

    def _log(self, name: str, namespace: str) -> str:
        try:
            return self.kube.pod_log(name, namespace, tail_lines=None, limit_bytes=32 << 20)
        except errors.ClusterError:
            return ""

    def _judged(self, result: warmup_pods.NodeResult, report: Report) -> None:
        self.results[result.node] = result
        report("warmup", describe(result))


def describe(r: warmup_pods.NodeResult) -> str:
    """One progress line for a node's warm-up."""
    if r.state != "done":
        return f"node {r.node}: warm-up {r.state.replace('_', ' ')}: {r.reason}"
    size = f"{(r.bytes or 0) / (1 << 30):.2f} GiB in {r.files} files"
    line = f"node {r.node}: weights read ({size}) in {r.seconds or 0:.1f} s"
    if r.check is not None:
        line += ", verified" if r.check.verified else ", NOT verified"
        line += f" against {r.check.manifest_name}" + (
            f" (signed by key {r.check.signer[:16]})" if r.check.signer else ""
        )
    if r.cache_error:
        line += f"; compile cache not writable: {r.cache_error}"
    return line


def start(
    kube: Kube, profile: Profile, objects: Sequence[Mapping[str, Any]], nodes: Sequence[str], report: Report
) -> Warmup:
    """Create a warm-up pod on each of ``nodes``; one left by an interrupted apply is replaced."""
    warmup = profile.rollout.warmup
    assert warmup is not None and warmup.enabled, "start only what the profile asks for"
    template = warmup_pods.pod_template(objects)
    deadline = time.monotonic() + warmup.timeoutSeconds + DEADLINE_GRACE_SECONDS
    started = Warmup(kube, profile, {}, deadline)
    report("warmup", f"warming {len(nodes)} node(s) while the current revision serves: {', '.join(nodes)}")
    try:
        for node in nodes:
            pod = warmup_pods.pod(profile, template, node)
            name = pod["metadata"]["name"]
            started.pods[node] = name  # before the create: cleanup deletes it whatever the create did
            try:
                kube.create(pod)
            except errors.Conflict:
                kube.delete("Pod", name, profile.metadata.namespace)  # a leftover of an interrupted apply
                _create_when_gone(kube, pod)
    except BaseException:
        started.cleanup()
        raise
    return started


def _create_when_gone(kube: Kube, pod: Mapping[str, Any]) -> None:
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        try:
            kube.create(pod)
            return
        except errors.Conflict:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_SECONDS)


def begin(
    kube: Kube,
    profile: Profile,
    objects: Sequence[Mapping[str, Any]],
    verdict: preflight.Preflight,
    *,
    replaces_pods: bool,
    report: Report,
) -> Warmup | None:
    """Warm the target nodes when the profile asks and new engine pods will start (a changed pod template,
    or a first install); None otherwise. Awaits all of them, or only the first for one-at-a-time."""
    spec = profile.rollout.warmup
    if spec is None or not spec.enabled or not replaces_pods:
        return None
    nodes = warmup_pods.targets(verdict, profile.gpus_per_pod)
    if not nodes:  # preflight refuses a release with no eligible node; this is one whose GPUs are all taken
        report("warmup", "no node has GPUs for a new pod now: nothing to warm")
        return None
    warm = start(kube, profile, objects, nodes, report)
    try:
        warm.wait(report, first=verdict.strategy_name == "one-at-a-time" and len(nodes) > 1)
    except BaseException:
        warm.cleanup()
        raise
    return warm


def check_public_key(profile: Profile) -> None:
    """Exit 2 before anything is written when model.verify.publicKey is no key deployctl can check with."""
    verify = profile.model.verify
    if verify is None or verify.publicKey is None:
        return
    try:
        signing.public_keys_from_pem(verify.publicKey.encode(), "model.verify.publicKey")
    except errors.UsageError as e:
        raise errors.InvalidProfile(
            f"model.verify.publicKey: {e.message}. Give the public key the weights were signed with "
            "(`openssl pkey -in KEY -pubout`), an ECDSA P-256 or Ed25519 key in PEM"
        ) from None
