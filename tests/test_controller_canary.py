"""The controller and a canary: the `deployctl.dev/rollout` annotation forwarded to the running
canary (only when it changes), and the canary's progress as the object's `Progressing` condition."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_controller_policy import NS, Kube, inference_profile
from test_resource_status import T0, T1, _by_type, _deployed, _slo_failed

from orchestrator.apply import canary_control
from orchestrator.controller import canary_rollout, resource_status


def _annotated(value: str | None) -> dict[str, Any]:
    obj = inference_profile()
    if value is not None:
        obj["metadata"]["annotations"] = {canary_rollout.ANNOTATION: value}
    return obj


CANARY_LABELS = {"deployctl.dev/release": "llm", "deployctl.dev/track": "canary"}


def _cluster(canary_running: bool = True, labels: dict[str, str] = CANARY_LABELS) -> Kube:
    kube = Kube()
    if canary_running:
        meta = {"name": "llm-canary", "namespace": NS, "labels": dict(labels)}
        kube.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta})
    return kube


def _sent(kube: Kube) -> dict[str, Any] | None:
    found = kube.get("Deployment", "llm-canary", NS) or {}
    text = (found.get("metadata") or {}).get("annotations", {}).get(canary_control.COMMAND_ANNOTATION)
    return json.loads(text) if text else None


def _forward(kube: Kube, before: dict[str, Any] | None, after: dict[str, Any]) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    canary_rollout.forward(
        kube, before, after, lambda _obj, kind, reason, message: events.append((kind, reason, message))
    )
    return events


def test_a_changed_annotation_is_sent_to_the_running_canary_naming_the_object() -> None:
    kube = _cluster()
    events = _forward(kube, _annotated(None), _annotated("pause"))
    sent = _sent(kube)
    assert sent is not None and sent["command"] == "pause"
    assert f"InferenceProfile {NS}/llm" in sent["by"], sent
    assert events == [("Normal", "RolloutCommand", "asked the running canary to pause")]


def test_the_first_sight_and_an_unchanged_annotation_send_nothing() -> None:
    kube = _cluster()
    assert _forward(kube, None, _annotated("abort")) == []  # a restarted controller replays nothing
    assert _forward(kube, _annotated("abort"), _annotated("abort")) == []
    assert _sent(kube) is None


def test_the_same_verb_again_needs_a_suffix() -> None:
    kube = _cluster()
    _forward(kube, _annotated("pause"), _annotated("pause/2"))
    assert (_sent(kube) or {})["command"] == "pause"


@pytest.mark.parametrize(
    ("value", "running", "said"), [("explode", True, "none of"), ("promote", False, "no canary running")]
)
def test_a_command_that_cannot_be_sent_is_said_in_a_warning_event(value: str, running: bool, said: str) -> None:
    kube = _cluster(canary_running=running)
    events = _forward(kube, _annotated(None), _annotated(value))
    assert [(k, r) for k, r, _ in events] == [("Warning", "RolloutCommandIgnored")] and said in events[0][2], events
    assert _sent(kube) is None


def test_progressing_shows_the_canary_and_turns_false_when_the_apply_ends() -> None:
    working = resource_status.reconciling(None, 2, T0)
    step = resource_status.canary_progress(working, 2, "window 1: pass: 5 checks held over 20 s", T0)
    progressing = _by_type(step)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("True", "Canary")
    assert "window 1: pass" in progressing["message"]
    promoted = resource_status.from_outcome(step, 2, _deployed(2), live_revision=2, profile_hash="h", now=T1)
    assert (_by_type(promoted)["Progressing"]["status"], _by_type(promoted)["Progressing"]["reason"]) == (
        "False",
        "Promoted",
    )
    failed = resource_status.from_outcome(step, 2, _slo_failed(), live_revision=1, profile_hash="h", now=T1)
    assert _by_type(failed)["Progressing"]["reason"] == "slo_failed"
    plain = resource_status.from_outcome(working, 2, _deployed(2), live_revision=2, profile_hash="h", now=T1)
    assert "Progressing" not in _by_type(plain), "no canary, no Progressing condition"


def test_only_the_canarys_step_lines_reach_the_condition() -> None:
    assert canary_rollout.shown("canary", "step 1/2: the new revision on 1 of 4 copies (beside)")
    assert canary_rollout.shown("canary", "window 2: inconclusive: too few requests")
    assert not canary_rollout.shown("canary", "llm-canary-7558c4f9c5-rhkpq: pulling image")
    assert not canary_rollout.shown("smoke", "step 1")


def test_a_deployment_named_like_the_canary_that_is_not_the_releases_is_never_annotated() -> None:
    kube = _cluster(labels={"app": "someone-elses"})
    events = _forward(kube, _annotated(None), _annotated("abort"))
    assert [r for _, r, _ in events] == ["RolloutCommandIgnored"] and "no canary running" in events[0][2]
    assert _sent(kube) is None and canary_control.progress(kube, "llm", NS) is None


def _publish(kube: Kube, text: str) -> None:
    annotations = {canary_control.STATUS_ANNOTATION: text}
    kube.merge_patch("Deployment", "llm-canary", NS, {"metadata": {**CANARY_META, "annotations": annotations}})


CANARY_META = {"name": "llm-canary", "namespace": NS, "labels": CANARY_LABELS}


def test_rollout_status_shows_only_the_published_fields_it_knows_of_plain_types() -> None:
    kube = _cluster()
    _publish(
        kube,
        '{"state": "analysing", "step": "one", "last": {"verdict": "pass", "canary_share": 0.25, "x": 1}, "evil": 1}',
    )
    shown = canary_control.progress(kube, "llm", NS) or {}
    assert shown["state"] == "analysing" and "step" not in shown and "evil" not in shown, shown
    assert shown["last"] == {"verdict": "pass", "canary_share": 0.25}, shown
    _publish(kube, '{"state": "paused", "last": {"canary_share": NaN}}')
    shown = canary_control.progress(kube, "llm", NS) or {}
    assert "state" not in shown and "last" not in shown, "a NaN makes the whole annotation unreadable"
    json.dumps(shown, allow_nan=False)  # what -o json prints is JSON


def test_a_new_run_starts_without_the_last_runs_progressing() -> None:
    step = resource_status.canary_progress(resource_status.reconciling(None, 2, T0), 2, "step 1/1", T0)
    again = resource_status.reconciling(step, 3, T1)
    assert "Progressing" not in _by_type(again)


def _ray_canary(kube: Kube, name: str, labels: dict[str, str], state: str = "") -> None:
    meta = {"name": name, "namespace": NS, "labels": dict(labels)}
    kube.create({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "status": {"state": state}})


def test_a_canary_of_copies_across_nodes_is_steered_on_its_first_raycluster() -> None:
    kube = _cluster(canary_running=False)
    _ray_canary(kube, "llm-0a1b2c3d-c1", CANARY_LABELS)
    _ray_canary(kube, "llm-0a1b2c3d-c0", CANARY_LABELS, state="ready")
    _ray_canary(kube, "llm-0a1b2c3d-0", {"deployctl.dev/release": "llm"}, state="ready")  # a stable copy
    _ray_canary(kube, "llm-aaaaaaaa-c0", {"app": "someone-elses"})  # sorts first, not the release's
    command = canary_control.send(kube, "llm", NS, "pause", by="alice")
    first = kube.get("RayCluster", "llm-0a1b2c3d-c0", NS) or {}
    sent = json.loads(first["metadata"]["annotations"][canary_control.COMMAND_ANNOTATION])
    assert sent == command.to_json() and sent["command"] == "pause"
    for other in ("llm-0a1b2c3d-c1", "llm-0a1b2c3d-0", "llm-aaaaaaaa-c0"):
        assert "annotations" not in (kube.get("RayCluster", other, NS) or {})["metadata"], other
    canary_control.publish(kube, "llm", NS, {"state": "analysing", "step": 1})
    shown = canary_control.progress(kube, "llm", NS) or {}
    assert shown["state"] == "analysing" and shown["command"]["command"] == "pause", shown
    assert shown["canary_copies"] == {"desired": 2, "ready": 1}, shown
    assert (canary_control.read(kube, "llm", NS) or command).by == "alice"
    canary_control.clear(kube, "llm", NS)
    assert canary_control.read(kube, "llm", NS) is None
