"""Time to serving: the kubelet's pull event in each wording, a pod's steps from its status, the
summary line, and the SLO on it (orchestrator.apply.time_to_serving, gate.verdict)."""

from __future__ import annotations

import pathlib
from types import SimpleNamespace
from typing import Any, cast

import pytest
from test_gate import report

from orchestrator.apply import cluster_preflight, verify
from orchestrator.apply import time_to_serving as tts
from orchestrator.gate import verdict as gate
from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.profile import slo
from orchestrator.records import releases
from orchestrator.render import manifests as render

PROFILES = pathlib.Path(__file__).resolve().parent.parent / "profiles"
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("685ms", 0.685),
        ("4.358345527s", 4.358345527),
        ("1m21.284220239s", 81.284220239),
        ("1h2m3s", 3723.0),
        ("250µs", 0.00025),
        ("12us", 0.000012),
        ("900ns", 9e-7),
    ],
)
def test_go_durations_as_the_kubelet_prints_them(text: str, seconds: float) -> None:
    assert tts.go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "4.3", "s", "4.3 s", "1m21", "abc5s"])
def test_what_is_not_a_go_duration_is_none(text: str) -> None:
    assert tts.go_duration(text) is None


def _event(message: str, reason: str = "Pulled") -> dict[str, Any]:
    return {"reason": reason, "message": message}


@pytest.mark.parametrize(
    ("message", "pull"),
    [
        # Kubernetes 1.19-1.24: the pull time only.
        (f'Successfully pulled image "{IMAGE}" in 4.358345527s', tts.Pull(4.358345527)),
        # 1.25 on: the wait behind other pulls too.
        (f'Successfully pulled image "{IMAGE}" in 4.358s (11.963s including waiting)', tts.Pull(4.358, 11.963)),
        # Today: durations cut to milliseconds and the image's size.
        (
            f'Successfully pulled image "{IMAGE}" in 1m21.284s (1m21.284s including waiting). '
            "Image size: 8123456 bytes.",
            tts.Pull(81.284, 81.284, 8123456),
        ),
        (f'Container image "{IMAGE}" already present on machine', tts.Pull(0.0)),
    ],
)
def test_the_pull_event_in_each_kubelet_wording(message: str, pull: tts.Pull) -> None:
    got = tts.image_pull([_event("Pulling image", "Pulling"), _event(message)], IMAGE)
    assert got is not None
    assert got.seconds == pytest.approx(pull.seconds) and got.image_bytes == pull.image_bytes
    assert (got.waited is None) == (pull.waited is None)
    if pull.waited is not None:
        assert got.waited == pytest.approx(pull.waited)


def test_another_containers_pull_is_not_the_serving_images() -> None:
    sidecar = _event('Successfully pulled image "busybox:1.36" in 2s (2s including waiting). Image size: 1 bytes.')
    assert tts.image_pull([sidecar], IMAGE) is None
    assert tts.image_pull([sidecar, _event(f'Container image "{IMAGE}" already present on machine')], IMAGE) == (
        tts.Pull(0.0)
    )


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "llm-7d9f-x2x7q", "creationTimestamp": "2026-12-06T10:00:00Z"},
        "spec": {
            "nodeName": "gpu-3",
            "containers": [{"name": "vllm", "image": IMAGE}, {"name": "proxy", "image": "p"}],
        },
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T10:00:02Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T10:03:40Z"},
            ],
            "containerStatuses": [
                {"name": "proxy", "state": {"running": {"startedAt": "2026-12-06T10:00:03Z"}}},
                {"name": "vllm", "state": {"running": {"startedAt": "2026-12-06T10:01:30Z"}}},
            ],
            **status,
        },
    }


def test_a_pods_steps_add_up_to_created_until_ready() -> None:
    pulled = _event(f'Successfully pulled image "{IMAGE}" in 1m20s (1m25s including waiting). Image size: 9 bytes.')
    start = tts.pod_start(_pod(), [pulled], {"weights_read": 120.0, "engine_init": 60.0})
    # Scheduled 2 s after creation; the serving container (not the sidecar) started 88 s after that,
    # 80 of them pulling; Ready 130 s after it started.
    assert start.steps == {"scheduling": 2.0, "image_pull": 80.0, "container_start": 8.0, "engine_start": 130.0}
    assert start.seconds == 220.0 and start.node == "gpu-3"
    assert start.image_bytes == 9 and start.pull_waited == 85.0
    assert start.to_json()["engine"] == {"weights_read": 120.0, "engine_init": 60.0}


def test_a_pod_not_ready_yet_has_no_total_and_an_unknown_pull_is_none() -> None:
    pod = _pod(conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T10:00:02Z"}])
    start = tts.pod_start(pod, [], {})
    assert start.steps["engine_start"] is None and start.seconds is None
    assert start.steps["image_pull"] is None and start.steps["container_start"] == 88.0


def test_a_malformed_time_is_unknown_not_a_crash() -> None:
    pod = _pod()
    pod["metadata"]["creationTimestamp"] = "yesterday"
    assert tts.pod_start(pod, [], {}).steps["scheduling"] is None


def test_the_summary_names_the_total_the_steps_and_the_slowest_pods_phases() -> None:
    slow = tts.PodStart(
        "llm-b",
        "n2",
        {"scheduling": 1.0, "image_pull": 0.0, "container_start": 2.0, "engine_start": 50.0},
        {"weights_read": 30.0},
    )
    fast = tts.PodStart(
        "llm-a", "n1", {"scheduling": 1.0, "image_pull": 0.0, "container_start": 1.0, "engine_start": 20.0}, {}
    )
    stored = tts.TimeToServing({"rollout": 55.0, "health": 1.25, "first_token": 0.25}, (fast, slow)).to_json()
    assert stored["seconds"] == 56.5 and stored["until"] == "first_token"
    assert tts.summary(stored) == (
        "56.5 s until the first token: rollout 55.0 s, health 1.2 s, first token 0.2 s, slowest pod llm-b "
        "(scheduling 1.0 s; image pull 0.0 s; container start 2.0 s; engine start 50.0 s; engine: weights read 30.0 s)"
    )
    healthy = tts.TimeToServing({"rollout": 3.0, "health": 1.0}).to_json()
    assert healthy["until"] == "healthy" and tts.summary(healthy) == "4.0 s until healthy: rollout 3.0 s, health 1.0 s"


def test_time_to_serving_is_an_slo_name_and_a_typo_gets_a_did_you_mean() -> None:
    assert slo.parse_slo({"time_to_serving_s": "<=600"})["time_to_serving_s"].threshold == 600
    with pytest.raises(ValueError, match="did you mean 'time_to_serving_s'"):
        slo.parse_slo({"time_to_serving": "<=600"})


def test_the_gate_judges_the_time_to_serving_when_a_rollout_was_timed() -> None:
    bench_report_good = report()
    slos = {"time_to_serving_s": "<=60"}
    fast = gate.evaluate(bench_report_good, slos, min_samples=1, serving=42.0)
    slow = gate.evaluate(bench_report_good, slos, min_samples=1, serving=75.5)
    untimed = gate.evaluate(bench_report_good, slos, min_samples=1)
    assert fast.verdict is gate.Verdict.PASS and fast.metrics["time_to_serving_s"] == 42.0
    assert slow.verdict is gate.Verdict.FAIL
    assert "time_to_serving_s = 75.5, misses <=60" in slow.summary()
    # `deployctl gate` outside a rollout has no start to judge: the SLO is left out, not inconclusive.
    assert untimed.verdict is gate.Verdict.PASS and all(c.metric != "time_to_serving_s" for c in untimed.checks)


# --- the startup probe from the last observation ---------------------------------------------------


def test_the_slowest_start_of_a_record_and_the_probe_it_calls_for() -> None:
    stored = tts.TimeToServing(
        {"rollout": 500.0},
        (
            tts.PodStart("a", "n", {"engine_start": 410.0}, {}),
            tts.PodStart("b", "n", {"engine_start": None}, {}),
            tts.PodStart("c", "n", {"engine_start": 120.0}, {}),
        ),
    ).to_json()
    assert tts.slowest_start(stored) == 410.0
    assert tts.slowest_start(None) is None and tts.slowest_start({"pods": []}) is None
    assert tts.startup_floor(410.0) == 660  # 615 s with the margin, in whole minutes


@pytest.mark.parametrize("forged", [10**400, 1e308 * 10, -5, "410", True, 8 * 24 * 3600])
def test_a_figure_in_a_record_that_no_start_can_have_is_unknown(forged: object) -> None:
    stored = {
        "seconds": forged,
        "steps": {"rollout": forged},
        "pods": [{"pod": "p", "seconds": forged, "steps": {"engine_start": forged}}],
    }
    assert tts.slowest_start(stored) is None
    assert tts.summary(stored) == "? until healthy: rollout ?"


def _rendered(name: str = "dev-tp2.yaml", **engine: object) -> tuple[profiles.Profile, list[dict[str, Any]]]:
    prof = profiles.load(PROFILES / name)
    if engine:
        prof = prof.model_copy(update={"engine": prof.engine.model_copy(update=engine)})
    return prof, render.render(prof, planner.plan(prof))


def _live(prof: profiles.Profile, engine_start: float) -> releases.Record:
    serving = tts.TimeToServing(
        {"rollout": engine_start}, (tts.PodStart("p", "n", {"engine_start": engine_start}, {}),)
    )
    live = SimpleNamespace(revision=3, plan=planner.plan(prof).to_json(), time_to_serving=serving.to_json())
    return cast(releases.Record, live)


def test_a_startup_probe_shorter_than_the_last_start_is_said_with_the_number_to_set() -> None:
    prof, objects = _rendered()
    allowed = cluster_preflight.startup_budget(objects)
    assert allowed is not None
    before = render.to_yaml(objects)
    warning = cluster_preflight.startup_probe_warning(prof, planner.plan(prof), _live(prof, allowed), objects)
    assert warning == (
        f"the startup probe allows {allowed} s but revision 3's pods took up to {allowed} s from container start "
        f"to Ready: a restarted pod would be killed while it loads; set engine.startupSeconds to at least "
        f"{tts.startup_floor(allowed)}"
    )
    assert render.to_yaml(objects) == before  # said, never changed: a probe change would replace every pod


def test_a_start_the_probe_already_covers_says_nothing() -> None:
    prof, objects = _rendered()
    assert cluster_preflight.startup_probe_warning(prof, planner.plan(prof), _live(prof, 30.0), objects) is None


def test_a_start_seen_on_another_setup_says_nothing_about_this_one() -> None:
    prof, objects = _rendered()
    other, _ = _rendered("prod-tp4.yaml")
    assert cluster_preflight.startup_probe_warning(prof, planner.plan(prof), _live(other, 10**5), objects) is None


# --- the release's clock and the first token ----------------------------------------------------------


def test_the_first_token_step_is_what_the_smoke_run_adds_after_rollout_and_health() -> None:
    clock = verify._Clock(started=0.0)
    clock.steps = {"rollout": 30.0, "health": 2.0}
    serving = clock.serving((), until_first_token=35.5)
    assert serving.steps == {"rollout": 30.0, "health": 2.0, "first_token": 3.5} and serving.seconds == 35.5
    assert serving.until == "first_token"
    assert clock.serving(()).until == "healthy" and clock.serving(()).seconds == 32.0


def test_the_time_to_serving_at_the_first_token_adds_the_runs_own_first_token() -> None:
    measured = report().model_copy(update={"first_token_s": 1.25})
    assert verify._first_token(measured, 32.0, 0.0) == 33.25
    assert verify._first_token(measured, 32.0, 10.0) == 43.25  # an attempt that got no token went before
    assert verify._first_token(measured, None, 0.0) is None  # not timed: `deployctl gate` has no rollout
    assert verify._first_token(report().model_copy(update={"first_token_s": None}), 32.0, 0.0) is None


def test_a_regression_check_never_compares_starts() -> None:
    # The previous revision may have replaced no pod: its time to serving says nothing about a start.
    previous = gate.evaluate(report(), {}, min_samples=1, serving=3.0).to_json()
    now = gate.evaluate(
        report(), {"time_to_serving_s": "<=600"}, 1, previous_report=previous, max_regression_pct=10.0, serving=300.0
    )
    assert now.verdict is gate.Verdict.PASS
    assert [c.metric for c in now.checks if c.metric == "time_to_serving_s"] == ["time_to_serving_s"]


# --- what the cluster says that no kubelet would -------------------------------------------------------


def test_times_without_a_zone_are_read_as_utc_beside_ones_with_it() -> None:
    pod = _pod()
    pod["metadata"]["creationTimestamp"] = "2026-12-06T10:00:00"  # no zone: UTC, as the API means it
    assert tts.pod_start(pod, [], {}).steps["scheduling"] == 2.0


def test_figures_no_start_can_have_are_unknown() -> None:
    huge = "9" * 400
    forged = [
        _event(f'Successfully pulled image "{IMAGE}" in {huge}s'),
        _event(f'Successfully pulled image "{IMAGE}" in 1s (2s including waiting). Image size: {huge} bytes.'),
    ]
    assert tts.image_pull(forged[:1], IMAGE) is None  # longer than a week: written, not measured
    pull = tts.image_pull(forged[1:], IMAGE)
    assert pull is not None and pull.seconds == 1.0 and pull.image_bytes is None
    pod = _pod()
    pod["status"]["conditions"][1]["lastTransitionTime"] = "9999-12-31T23:59:59Z"
    assert tts.pod_start(pod, [], {"weights_read": float("inf")}).steps["engine_start"] is None
    assert tts.pod_start(pod, [], {"weights_read": float("inf")}).engine == {}
