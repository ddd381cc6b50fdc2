"""The warm-up before the swap: start a pod on each target node, await them, judge, and leave nothing.

``begin`` creates a deny-all NetworkPolicy for the warm-up pods and the pods themselves
(orchestrator/apply/warmup_pods.py) while the old revision still serves, and awaits them: all of them
before a rollout that starts every new pod at once, or whenever model.verify must vouch for every
node before a GPU pod reads it; only the first before a plain one-at-a-time rollout, whose later
nodes go on warming while the first new pod starts. ``Warmup.failure`` says whether to stop.

Before the first write: a weights mismatch and a compile cache the pod cannot write always stop (the
engine would load the wrong bytes, or fail to start); so does any failed warm-up under model.verify
(nothing vouched for the weights); otherwise rollout.warmup.onFailure decides. After it, only the
nodes that got a new engine pod are judged, and with model.verify a new pod on a node the warm-up
did not verify is a failure too (``unverified``). ``Warmup.cleanup`` deletes the pods and the
NetworkPolicy on every exit path. A rollback never runs a warm-up: its pods ran before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Collection, Mapping, Sequence
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
EVENTS_EVERY_SECONDS = 5.0
Report = Callable[[str, str], None]
Abort = Callable[[], str | None]


@dataclasses.dataclass
class Warmup:
    """Warm-up pods started on ``pods`` (node → pod name, with the uid each was created with) and what
    each one's report said."""

    kube: Kube
    profile: Profile
    pods: dict[str, str]
    deadline: float  # monotonic
    uids: dict[str, str] = dataclasses.field(default_factory=dict)
    started: float = dataclasses.field(default_factory=time.monotonic)
    finished: float | None = None  # when the last result was judged
    results: dict[str, warmup_pods.NodeResult] = dataclasses.field(default_factory=dict)
    policy: str | None = None  # the deny-all NetworkPolicy's name, once created
    _events_read: dict[str, float] = dataclasses.field(default_factory=dict)  # pod → when its events were read

    def wait(
        self, report: Report, *, first: bool = False, nodes: Collection[str] | None = None, abort: Abort | None = None
    ) -> None:
        """Await the pods of ``nodes`` (all: None), or with ``first`` the first of them to end, judging
        each as it ends; returns at the deadline (the rest judged as they are) or once ``abort`` says why."""
        wanted = [n for n in self.pods if nodes is None or n in nodes]
        while not self._enough(wanted, first):
            if abort is not None and abort() is not None:
                return
            live = self._pods()
            if live is not None:
                for node in wanted:
                    if node not in self.results:
                        self._look(node, live.get(self.pods[node]), report)
            if self._stops_now(nodes):
                return  # it stops the rollout whatever the other nodes say: no need to wait for them
            if time.monotonic() > self.deadline:
                for node in wanted:
                    if node not in self.results:
                        self._judged(
                            warmup_pods.judge(self.profile, node, (live or {}).get(self.pods[node]), ""), report
                        )
                return
            if not self._enough(wanted, first):
                time.sleep(POLL_SECONDS)

    def failure(self, *, new_pods: Collection[str] | None = None) -> tuple[Failure | None, list[str]]:
        """The failure that stops the rollout (None: go on) and the warnings to give. Before the first
        write (``new_pods`` None) every node counts; after it, the nodes the new engine pods run on."""
        verify = self.profile.model.verify is not None
        late = new_pods is not None
        judged = [r for n, r in sorted(self.results.items()) if new_pods is None or n in new_pods]
        mismatched = [(r, r.check) for r in judged if r.check is not None and not r.check.verified]
        if mismatched:
            r, check = mismatched[0]
            started = "GPU pods started from them and are rolled back" if late else "No GPU pod was started from them"
            message = f"the weights on node {r.node} are not the ones model.verify names: {check.explain()} {started}."
            return Failure("weights_mismatch", message, "warmup"), []
        if unwritable := [r for r in judged if r.cache_error]:
            return Failure("cache_not_writable", self._cache_message(unwritable[0]), "warmup"), []
        if late and verify and (unverified := sorted(n for n in new_pods or () if n not in self._verified())):
            message = (
                f"new engine pods run on {', '.join(unverified)}, where the warm-up did not verify the weights "
                "(not a target when it began, or its warm-up did not finish): model.verify cannot vouch for them"
            )
            return Failure("weights_unverified", message, "warmup"), []
        if verify and not late and not self.pods:
            message = "no node has GPUs for a new pod now, so model.verify could check the weights nowhere"
            return Failure("warmup_failed", message + "; no GPU pod was started", "warmup"), []
        failed = [r for r in judged if r.state != "done"]
        if not failed:
            return None, []
        said = "; ".join(f"node {r.node}: {r.reason}" for r in failed[:3])
        policy = self.profile.rollout.warmup.onFailure if self.profile.rollout.warmup else "stop"
        if not late and (verify or policy == "stop"):
            why = "model.verify needs every node checked" if verify else "rollout.warmup.onFailure is stop"
            return Failure(
                "warmup_failed", f"the warm-up failed ({said}); {why}, so no GPU pod was started", "warmup"
            ), []
        return None, [f"the warm-up failed and the rollout goes on unwarmed there: {said}"]

    def to_json(self) -> dict[str, object]:
        """The warm-up for the release record: its nodes, what each read and what its checks found."""
        until = self.finished if self.finished is not None else time.monotonic()
        return {
            "seconds": round(until - self.started, 3),
            "nodes": [self.results[n].to_json() for n in sorted(self.results)],
            "pending": sorted(n for n in self.pods if n not in self.results),
        }

    def cleanup(self) -> list[str]:
        """Delete every warm-up pod and the NetworkPolicy, and wait until the pods are gone; the names
        still there after CLEANUP_SECONDS."""
        namespace = self.profile.metadata.namespace
        for name in self.pods.values():
            with contextlib.suppress(errors.ClusterError):  # what is not deleted is listed below as left behind
                self.kube.delete("Pod", name, namespace)
        deadline = time.monotonic() + CLEANUP_SECONDS
        while (left := sorted(set(self.pods.values()) & set(self._pods() or {}))) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if self.policy is not None:
            with contextlib.suppress(errors.ClusterError):
                self.kube.delete("NetworkPolicy", self.policy, namespace)
        return left

    def _stops_now(self, nodes: Collection[str] | None) -> bool:
        """Whether a node judged so far already stops the rollout (``failure`` on the rest is moot)."""
        done = [r for n, r in self.results.items() if nodes is None or n in nodes]
        if any((r.check is not None and not r.check.verified) or r.cache_error for r in done):
            return True
        warm = self.profile.rollout.warmup
        stopping = self.profile.model.verify is not None or (warm is not None and warm.onFailure == "stop")
        return nodes is None and stopping and any(r.state != "done" for r in done)

    def _enough(self, wanted: Sequence[str], first: bool) -> bool:
        done = [n for n in wanted if n in self.results]
        return len(done) == len(wanted) or (first and bool(done))

    def _look(self, node: str, pod: Mapping[str, Any] | None, report: Report) -> None:
        name = self.pods[node]
        if pod is not None and self.uids.get(name) not in (None, pod.get("metadata", {}).get("uid")):
            # Deleted and created again by someone else: its report is not the warm-up's.
            self._judged(warmup_pods.NodeResult(node, "failed", "its pod was replaced by another of that name"), report)
            return
        if pod is not None and warmup_pods.ended(pod) is None:
            if (stuck := self._volume_trouble(name)) is not None:
                self._judged(stuck(node), report)
            return
        log = ""
        if pod is not None and warmup_pods.ended(pod) == "Succeeded":
            read = self._log(name)
            if read is None:
                return  # the API server did not answer: read it again at the next poll
            log = read
        self._judged(warmup_pods.judge(self.profile, node, pod, log), report)

    def _volume_trouble(self, name: str) -> Callable[[str], warmup_pods.NodeResult] | None:
        """A pod whose volumes cannot be set up never ends on its own: judged from the events that say
        why (a ReadWriteOnce claim attached to another node, a node directory that is not there), read
        every EVENTS_EVERY_SECONDS while it waits."""
        now = time.monotonic()
        if now - self._events_read.get(name, 0.0) < EVENTS_EVERY_SECONDS:
            return None
        self._events_read[name] = now
        try:
            events, _ = self.kube.list("Event", self.profile.metadata.namespace, fields=f"involvedObject.name={name}")
        except errors.ClusterError:
            return None
        cache = self.profile.engine.compileCache
        return warmup_pods.volume_trouble(events, cache.hostPath if cache is not None else None)

    def _cache_message(self, r: warmup_pods.NodeResult) -> str:
        cache = self.profile.engine.compileCache
        fix = (
            f"on the node, run `install -d -o 1000 -g 1000 {cache.hostPath}`"
            if cache is not None and cache.hostPath
            else "give the claim's files a group the pod's engine.fsGroup can write (many NFS and CephFS drivers "
            "ignore fsGroup: chown the claim's top directory to 1000 once)"
        )
        return f"the compile cache on node {r.node}: {r.cache_error}; the engine could not write it there: {fix}"

    def _verified(self) -> set[str]:
        return {n for n, r in self.results.items() if r.state == "done" and r.check is not None and r.check.verified}

    def _pods(self) -> dict[str, dict[str, Any]] | None:
        """The warm-up pods by name; None when the API server did not answer (read again next poll)."""
        selector = f"{warmup_pods.LABEL}={self.profile.metadata.name}"
        try:
            items, _ = self.kube.list("Pod", self.profile.metadata.namespace, labels=selector)
        except errors.ClusterError:
            return None
        return {i["metadata"]["name"]: i for i in items}

    def _log(self, name: str) -> str | None:
        try:
            return self.kube.pod_log(name, self.profile.metadata.namespace, tail_lines=None, limit_bytes=32 << 20)
        except errors.ClusterError:
            return None

    def _judged(self, result: warmup_pods.NodeResult, report: Report) -> None:
        self.results[result.node] = result
        self.finished = time.monotonic()
        report("warmup", describe(result))


def describe(r: warmup_pods.NodeResult) -> str:
    """One progress line for a node's warm-up."""
    if r.state != "done":
        return f"node {r.node}: warm-up {r.state.replace('_', ' ')}: {r.reason}"
    size = f"{(r.bytes or 0) / (1 << 30):.2f} GiB in {r.files} files"
    line = f"node {r.node}: weights read ({size}) in {r.seconds or 0:.1f} s"
    if r.check is not None:
        line += ", verified" if r.check.verified else ", NOT verified"
        line += f" against {r.check.manifest_name}"
        line += f" (signed by key {r.check.signer[:16]})" if r.check.signer else ""
    if r.cache_error:
        line += f"; compile cache not writable: {r.cache_error}"
    return line


def start(
    kube: Kube, profile: Profile, objects: Sequence[Mapping[str, Any]], nodes: Sequence[str], report: Report
) -> Warmup:
    """Create the deny-all NetworkPolicy and a warm-up pod on each of ``nodes``; a pod left by an
    interrupted apply is replaced. Whatever was created is deleted again when creating fails."""
    warmup = profile.rollout.warmup
    assert warmup is not None and warmup.enabled, "start only what the profile asks for"
    template = warmup_pods.pod_template(objects)
    deadline = time.monotonic() + warmup.timeoutSeconds + DEADLINE_GRACE_SECONDS
    started = Warmup(kube, profile, {}, deadline)
    report("warmup", f"warming {len(nodes)} node(s) while the current revision serves: {', '.join(nodes)}")
    try:
        policy = warmup_pods.network_policy(profile)
        _create(kube, policy, profile.metadata.name)
        started.policy = policy["metadata"]["name"]
        for node in nodes:
            pod = warmup_pods.pod(profile, template, node)
            created = _create(kube, pod, profile.metadata.name)
            started.pods[node] = pod["metadata"]["name"]
            started.uids[pod["metadata"]["name"]] = str(created.get("metadata", {}).get("uid", ""))
    except BaseException:
        started.cleanup()
        raise
    return started


def _create(kube: Kube, obj: Mapping[str, Any], release: str) -> dict[str, Any]:
    """Create ``obj``; one of that name left by an interrupted warm-up of this release is replaced, and
    one that is not the warm-up's is never touched (the apply stops, naming it)."""
    kind, name, namespace = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    deadline = time.monotonic() + CLEANUP_SECONDS
    while True:
        try:
            return kube.create(obj)
        except errors.Conflict:
            there = kube.get(kind, name, namespace)
            if there is not None and there.get("metadata", {}).get("labels", {}).get(warmup_pods.LABEL) != release:
                raise errors.RolloutFailed(
                    f"{kind} {namespace}/{name} exists and is not {release}'s warm-up: deployctl does not take "
                    "it over. Rename or remove it; nothing of the release was changed"
                ) from None
            if there is not None and there.get("metadata", {}).get("deletionTimestamp") is None:
                kube.delete(kind, name, namespace)
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
    abort: Abort,
) -> Warmup | None:
    """Warm the target nodes when the profile asks and new engine pods will start (a changed pod template,
    or a first install); None otherwise. Awaits all of them, or only the first for one-at-a-time."""
    spec = profile.rollout.warmup
    if spec is None or not spec.enabled or not replaces_pods:
        return None
    nodes = warmup_pods.targets(verdict, profile.gpus_per_pod)
    if not nodes:  # preflight refuses a release with no eligible node; this is one whose GPUs are all taken
        report("warmup", "no node has GPUs for a new pod now: nothing to warm")
        return Warmup(kube, profile, {}, time.monotonic())  # failure() says whether model.verify may go on
    warm = start(kube, profile, objects, nodes, report)
    # Overlap only where nothing must be vouched for first: model.verify checks every node before any GPU pod.
    overlap = verdict.strategy_name == "one-at-a-time" and len(nodes) > 1 and profile.model.verify is None
    try:
        warm.wait(report, first=overlap, abort=abort)
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
