"""Time to serving: how long a revision took from the write to its first token, and where it went.

Two clocks, each used for what it can tell:

* **The release** is timed on deployctl's own monotonic clock, in the steps verify runs: ``rollout``
  (from the write, or from the GitOps gate's start, until every new pod is Ready), ``health`` (until
  every new pod answered the engine's health path) and ``first_token`` (the smoke run's first token:
  from the start of the smoke run to its fastest time to first token). Their sum is the time to serving.
* **Each new pod** is timed on the API server's clock, from its own status and events: ``scheduling``
  (created → PodScheduled), ``image_pull`` (the kubelet's "Successfully pulled image … in D" event;
  0 when the image was already present), ``container_start`` (the rest until the serving container
  started: sandbox, init containers, volumes) and ``engine_start`` (started → Ready), and inside it
  the engine's own phases from its log (``orchestrator.engines.startup_phases``).

The API server writes its times to the second, so a pod's steps are whole seconds; the release's
are not. Pure: objects and text in, figures out; ``verify`` does the reading.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Iterable, Mapping

from orchestrator.engines import startup_phases
from orchestrator.kube import status as kube_status
from orchestrator.kube.status import Object
from orchestrator.records import encoding

# The release's steps, in order (verify's timings of the same names), and each pod's.
RELEASE_STEPS = ("rollout", "health", "first_token")
POD_STEPS = ("scheduling", "image_pull", "container_start", "engine_start")

# The kubelet's event (pkg/kubelet/images/image_manager.go); since Kubernetes 1.19 it says how long
# the pull took, later also how long it waited behind other pulls and the image's size:
#   Successfully pulled image "img" in 4.358s (11.963s including waiting). Image size: 8123456 bytes.
_PULLED = re.compile(
    r'Successfully pulled image "(?P<image>[^"]+)" in (?P<pull>[0-9.hmsµun]+)'
    r"(?: \((?P<waited>[0-9.hmsµun]+) including waiting\))?(?:\. Image size: (?P<bytes>\d{1,18}) bytes)?"
)
_PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')
# A restart must never kill a pod that is still loading: the startup probe should allow the slowest
# start a revision of the same setup showed, times this margin, in whole minutes.
STARTUP_MARGIN = 1.5
seconds_of = encoding.seconds  # every figure read from events, logs and records passes it
_GO_UNIT = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|µs|us|ns)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.Duration`` as ``%v`` prints it (``1m21.28s``, ``685ms``); None if it is not one."""
    parts = _GO_UNIT.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return seconds_of(sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))


@dataclasses.dataclass(frozen=True)
class Pull:
    """How the kubelet got the serving container's image."""

    seconds: float  # the pull itself; 0 when the image was already on the node
    waited: float | None = None  # including the wait behind other pulls, when the kubelet says
    image_bytes: int | None = None


def image_pull(events: Iterable[Object], image: str) -> Pull | None:
    """The kubelet's account of pulling ``image`` among a pod's ``events``; None when it gave none."""
    for event in events:
        if kube_status.text(event.get("reason")) != "Pulled":
            continue
        message = kube_status.text(event.get("message"))
        # Which component wrote the event is not checked: anyone who may create events in the namespace
        # can also write one that says "kubelet", so the figures are the kubelet's word as far as it goes.
        if (present := _PRESENT.search(message)) and present["image"] == image:
            return Pull(0.0)
        pulled = _PULLED.search(message)
        if pulled is None or pulled["image"] != image or (seconds := go_duration(pulled["pull"])) is None:
            continue
        waited = go_duration(pulled["waited"]) if pulled["waited"] else None
        return Pull(seconds, waited, int(pulled["bytes"]) if pulled["bytes"] else None)
    return None


def _instant(text: str) -> datetime.datetime | None:
    """An RFC 3339 time as the API server writes it; None when absent or malformed."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    if moment is not None and moment.tzinfo is None:  # the API writes UTC; a time without a zone is read as UTC
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def _between(start: datetime.datetime | None, end: datetime.datetime | None) -> float | None:
    return seconds_of(max(0.0, (end - start).total_seconds())) if start and end else None


@dataclasses.dataclass(frozen=True)
class PodStart:
    """One new pod's start: seconds per step (None: not known) and the engine's phases from its log."""

    pod: str
    node: str
    steps: Mapping[str, float | None]
    engine: Mapping[str, float]
    image_bytes: int | None = None
    pull_waited: float | None = None
    restarts: int = 0  # of the serving container: a startup probe that killed a loading pod shows here

    @property
    def seconds(self) -> float | None:
        """Created → Ready, on the API server's clock."""
        known = [s for s in self.steps.values() if s is not None]
        return sum(known) if self.steps.get("engine_start") is not None else None

    def to_json(self) -> dict[str, object]:
        return {
            "pod": self.pod,
            "node": self.node,
            "seconds": self.seconds,
            "steps": dict(self.steps),
            "engine": dict(self.engine),
            "image_bytes": self.image_bytes,
            "pull_waited": self.pull_waited,
            "restarts": self.restarts,
        }


def pod_start(pod: Object, events: Iterable[Object], engine_phases: Mapping[str, float]) -> PodStart:
    """The steps of ``pod`` from its status, its ``events`` and its engine's logged phases."""
    view = kube_status.Pod.from_object(pod)
    serving, image = view.specified[0] if view.specified else ("", "")
    running = next((c for c in view.containers if c.name == serving), None)
    created = _instant(view.meta.created)
    scheduled = _instant(c.since) if (c := view.condition("PodScheduled")) and c.true else None
    started = _instant(running.started_at) if running else None
    ready = _instant(c.since) if (c := view.condition("Ready")) and c.true else None
    pull = image_pull(events, image)
    until_started = _between(scheduled, started)
    steps = {
        "scheduling": _between(created, scheduled),
        "image_pull": pull.seconds if pull else None,
        "container_start": None if until_started is None else max(0.0, until_started - (pull.seconds if pull else 0)),
        "engine_start": _between(started, ready),
    }
    return PodStart(
        view.meta.name,
        view.node,
        {k: None if v is None else round(v, 3) for k, v in steps.items()},
        {k: v for k, v in engine_phases.items() if seconds_of(v) is not None},
        pull.image_bytes if pull else None,
        pull.waited if pull else None,
        running.restart_count if running else 0,
    )


@dataclasses.dataclass(frozen=True)
class TimeToServing:
    """A revision's time to serving: the release's steps and every new pod's start."""

    steps: Mapping[str, float]  # RELEASE_STEPS that ran, in seconds
    pods: tuple[PodStart, ...] = ()
    # The warm-up before the first write (orchestrator/apply/warmup.py), while the old revision served:
    # not part of the time to serving, which starts at the write.
    warmup: Mapping[str, object] | None = None

    @property
    def seconds(self) -> float:
        return round(sum(self.steps.values()), 3)

    @property
    def until(self) -> str:
        """What "serving" meant: the first token of the smoke run, or healthy when it did not run."""
        return "first_token" if "first_token" in self.steps else "healthy"

    def to_json(self) -> dict[str, object]:
        # No step ran when only the warm-up did (it stopped the revision): no time to serving to give.
        return {
            "seconds": self.seconds if self.steps else None,
            "until": self.until if self.steps else None,
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
            "pods": [p.to_json() for p in self.pods],
            **({"warmup": dict(self.warmup)} if self.warmup is not None else {}),
        }


def slowest_start(stored: Mapping[str, object] | None) -> float | None:
    """The slowest engine start (container started → Ready) among a stored ``TimeToServing.to_json()``'s pods."""
    pods = kube_status.mappings((stored or {}).get("pods"))
    starts = [s for p in pods if (s := seconds_of(kube_status.mapping(p.get("steps")).get("engine_start"))) is not None]
    return max(starts) if starts else None


def startup_floor(slowest: float) -> int:
    """Seconds the startup probe should allow for a start as slow as ``slowest`` (STARTUP_MARGIN)."""
    return math.ceil(slowest * STARTUP_MARGIN / 60) * 60


def summary(stored: Mapping[str, object]) -> str:
    """One line of a stored ``TimeToServing.to_json()``: the total, the release's steps and the slowest pod's."""
    steps = kube_status.mapping(stored.get("steps"))
    line = (
        f"{_s(stored.get('seconds'))} until {'the first token' if stored.get('until') == 'first_token' else 'healthy'}"
    )
    parts = [f"{name.replace('_', ' ')} {_s(steps[name])}" for name in RELEASE_STEPS if name in steps]
    timed = [
        (s, p) for p in kube_status.mappings(stored.get("pods")) if (s := seconds_of(p.get("seconds"))) is not None
    ]
    if timed:
        slow = max(timed, key=lambda pair: pair[0])[1]
        pod_steps = kube_status.mapping(slow.get("steps"))
        inner = [f"{n.replace('_', ' ')} {_s(pod_steps[n])}" for n in POD_STEPS if pod_steps.get(n) is not None]
        engine = kube_status.mapping(slow.get("engine"))  # stored with sorted keys: said in the order of a start
        if phases := [n for n in startup_phases.PHASES if n in engine]:
            inner.append("engine: " + ", ".join(f"{n.replace('_', ' ')} {_s(engine[n])}" for n in phases))
        parts.append(f"slowest pod {kube_status.text(slow.get('pod'))} ({'; '.join(inner)})")
    if warmup := kube_status.mapping(stored.get("warmup")):
        parts.append(warmup_summary(warmup))
    return f"{line}: {', '.join(parts)}" if parts else line


def warmup_summary(warmup: Mapping[str, object]) -> str:
    """The stored warm-up in a few words: its nodes, its time, and whether the weights verified."""
    nodes = kube_status.mappings(warmup.get("nodes"))
    done = [n for n in nodes if n.get("state") == "done"]
    text = f"before it, a warm-up of {len(done)}/{len(nodes)} node(s) in {_s(warmup.get('seconds'))}"
    checks = [kube_status.mapping(n.get("verification")) for n in nodes if n.get("verification")]
    if checks:
        good = all(c.get("verified") is True for c in checks)
        text += (
            f" (weights {'verified' if good else 'NOT verified'} against {kube_status.text(checks[0].get('manifest'))})"
        )
    return text


def _s(value: object) -> str:
    return "?" if (seconds := seconds_of(value)) is None else f"{seconds:.1f} s"
