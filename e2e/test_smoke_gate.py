"""The smoke benchmark and the SLO gate of `deployctl apply` on the real control plane.

The gate's four verdicts, each reached through the real serving path (a port-forward through
the API server to a vLLM simulator): Pass is recorded and shown; Fail (an SLO missed, or a
regression past `gate.maxRegression` against the previous release) rolls back with exit 6;
Error (the server could not be measured) is told apart from Fail; Inconclusive (too few
samples) holds the revision without rollback and warns. Pod port 8000 reaches a healthy
simulator; a bad revision moves the profile to `engine.port: 8001`, which reaches whatever the
test configures there (the trick of e2e/test_apply.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from deployhelpers import DEPLOYCTL, GOOD_ITL_MS, ReleaseEnv, profile, write_profile

pytestmark = pytest.mark.kwok

SLO_P95_TTFT_MS = 500  # deployhelpers.profile's SLO: p95_ttft_ms <=500, median_tpot_ms <=50
LOOSE_P95_TTFT_MS = 2000


def _checks(gate: dict[str, Any], metric: str) -> dict[str, Any]:
    return next(c for c in gate["checks"] if c["metric"] == metric)


def test_healthy_simulator_passes_the_gate_and_the_verdict_is_recorded_and_shown(env: ReleaseEnv) -> None:
    result = env.apply(profile(env.namespace))
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["gate"]["verdict"] == "pass"
    ttft = _checks(out["gate"], "p95_ttft_ms")
    assert ttft["verdict"] == "pass" and 0 < ttft["measured"] <= SLO_P95_TTFT_MS
    assert out["gate"]["bench"]["config"]["requests"] == 16
    record = env.record(1)
    assert record["outcome"] == "deployed" and record["gate"]["verdict"] == "pass"
    assert record["gate"]["metrics"]["completed"] == 16
    assert env.status()["gate"]["verdict"] == "pass"
    assert [(r["revision"], r["status"], r["gate"]) for r in env.history()] == [(1, "deployed", "pass")]


def test_simulator_slower_than_the_slo_fails_the_gate_and_is_rolled_back(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    slow = simulator(model="sim-model", ttft_ms=2 * SLO_P95_TTFT_MS, itl_ms=GOOD_ITL_MS)
    env.forward_8001(slow.port)
    result = env.apply(profile(env.namespace, port=8001))
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "rolled_back" and out["rolled_back_to"] == 1
    assert out["failure"]["class"] == "slo_failed" and out["failure"]["stage"] == "smoke"
    assert out["gate"]["verdict"] == "fail"
    assert _checks(out["gate"], "p95_ttft_ms")["verdict"] == "fail"
    assert "p95_ttft_ms" in out["failure"]["message"]
    assert [(r["revision"], r["status"], r["gate"]) for r in env.history()] == [
        (1, "superseded", "pass"),
        (2, "failed", "fail"),
        (3, "deployed", None),  # the rollback is health-gated only
    ]
    assert env.record(2)["failure"]["class"] == "slo_failed"
    status = env.status()
    assert status["live_revision"] == 3 and status["last_failure"]["class"] == "slo_failed"
    assert env.deployment().spec.template.spec.containers[0].ports[0].container_port == 8000


def test_server_that_refuses_connections_after_health_is_an_error_not_a_fail(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    """Health passes, then the server stops accepting connections: nothing could be measured.

    Pod port 8001 first reaches a simulator whose /health answers but whose streams stall
    (so the health gate passes and a first smoke attempt can only time out), and is switched
    to a refusing one as soon as deployctl reports the pods healthy: every smoke attempt
    after that meets refused connections, whatever the timing of the switch.
    """
    assert env.apply(profile(env.namespace)).code == 0
    stalled = simulator(model="sim-model", fault="stall")
    refusing = simulator(model="sim-model", fault="refuse")
    env.forward_8001(stalled.port)
    doc = profile(env.namespace, port=8001)
    doc["gate"]["smoke"] = {**doc["gate"]["smoke"], "timeoutSeconds": 5}  # a stalled attempt ends in 5 s
    path = write_profile(env.tmp, doc)
    stderr_log = env.tmp / "apply.stderr"
    with stderr_log.open("wb") as err:
        proc = subprocess.Popen(
            [DEPLOYCTL, "apply", str(path), "--output", "json", "--kubeconfig", str(env.kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    switched = threading.Event()

    def switch_to_refusing_once_healthy() -> None:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if "[health]" in (text := stderr_log.read_text(errors="replace")) and "healthy: " in text:
                env.forward_8001(refusing.port)
                switched.set()
                return
            time.sleep(0.05)

    switcher = threading.Thread(target=switch_to_refusing_once_healthy)
    switcher.start()
    stdout, _ = proc.communicate(timeout=180)
    switcher.join()
    stderr = stderr_log.read_text(errors="replace")
    assert switched.is_set(), stderr
    assert proc.returncode == 6, stdout.decode() + stderr
    out = json.loads(stdout)
    assert out["failure"]["class"] == "gate_error", out["failure"]
    assert out["gate"]["verdict"] == "error" and out["rolled_back_to"] == 1
    assert "attempt 3" in stderr  # Error is retried; Fail would not have been
    assert [(r["revision"], r["status"], r["gate"]) for r in env.history()] == [
        (1, "superseded", "pass"),
        (2, "failed", "error"),
        (3, "deployed", None),
    ]


def test_too_few_samples_is_inconclusive_and_holds_the_revision_without_rollback(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    # The new revision's server fails 3 requests in 4, and no SLO is on the error rate: too few
    # samples to judge latency, which is no evidence against the revision.
    flaky = simulator(model="sim-model", ttft_ms=20, itl_ms=GOOD_ITL_MS, failure_rate=75)
    env.forward_8001(flaky.port)
    doc = profile(env.namespace, port=8001)
    doc["gate"]["smoke"] = {**doc["gate"]["smoke"], "slo": {"p95_ttft_ms": "<=500"}}
    result = env.apply(doc)
    assert result.code == 0, result.stdout + result.stderr
    out = result.json
    assert out["result"] == "deployed" and out["revision"] == 2 and out["rolled_back_to"] is None
    assert out["gate"]["verdict"] == "inconclusive"
    samples = _checks(out["gate"], "completed")
    assert samples["verdict"] == "inconclusive" and samples["measured"] < 8  # minSamples of profile()
    assert any("inconclusive" in w for w in out["warnings"]), out["warnings"]
    assert [(r["revision"], r["status"], r["gate"]) for r in env.history()] == [
        (1, "superseded", "pass"),
        (2, "deployed", "inconclusive"),
    ]
    status = env.status()
    assert status["live_revision"] == 2 and status["last_failure"] is None
    assert env.deployment().spec.template.spec.containers[0].ports[0].container_port == 8001


def test_regression_past_max_regression_against_the_previous_release_fails_within_the_slo(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    # The SLO is loose here so that only the regression can fail the gate, and the slower server is
    # at least three times the measured baseline, which a loaded CI machine can push near 100 ms.
    gate = {**profile(env.namespace)["gate"], "maxRegression": 50}
    gate["smoke"] = {**gate["smoke"], "slo": {"p95_ttft_ms": f"<={LOOSE_P95_TTFT_MS}"}}
    first = env.apply(profile(env.namespace, gate=gate))
    assert first.code == 0, first.stdout + first.stderr
    baseline = _checks(first.json["gate"], "p95_ttft_ms")["measured"]
    assert first.json["gate"]["verdict"] == "pass"
    slower_ttft_ms = max(SLO_P95_TTFT_MS // 2, int(3 * baseline))
    assert 2 * slower_ttft_ms < LOOSE_P95_TTFT_MS, f"baseline p95 TTFT {baseline} ms is too slow to compare"
    slower = simulator(model="sim-model", ttft_ms=slower_ttft_ms, itl_ms=GOOD_ITL_MS)
    env.forward_8001(slower.port)
    doc = profile(env.namespace, port=8001, gate=gate)
    result = env.apply(doc)
    assert result.code == 6, result.stdout + result.stderr
    out = result.json
    assert out["failure"]["class"] == "slo_failed" and out["rolled_back_to"] == 1
    slo_row = _checks(out["gate"], "p95_ttft_ms")
    assert slo_row["verdict"] == "pass"  # the SLO alone would have let it through
    assert slo_row["previous"] == pytest.approx(baseline) and slo_row["delta_pct"] > 50
    regression = _checks(out["gate"], "p95_ttft_ms vs previous")
    assert regression["verdict"] == "fail" and "limit 50%" in regression["reason"]
    assert "p95_ttft_ms" in out["failure"]["message"] and "worse by" in out["failure"]["message"]
