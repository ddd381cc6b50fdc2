"""The controller within its policy, without a cluster: a refused InferenceProfile gets a Stalled status
and an event, and nothing else (no finalizer, no workload); an allowed one goes on; deleting takes the
release lock; an object in a namespace not opted in is reported, not retried in a loop; one slow
object holds one worker, never the others.

The API server is the in-memory stand-in of tests/test_releases.py; e2e/test_policy_cluster.py runs the
same against the real control plane.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
import time
from typing import Any

import pytest
import test_releases as tr
from click.testing import CliRunner

from orchestrator import errors
from orchestrator.apply import lock, sequence
from orchestrator.cli import app as cli
from orchestrator.controller import reconciler as controller
from orchestrator.controller import workqueue
from orchestrator.policy import model as policy
from orchestrator.profile import model as profiles

NS = "team-a"
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "4f1c7b0d" * 8


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """A JSON merge patch (RFC 7386), as the API server applies it: None deletes a key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class Kube(tr.FakeKube):
    """The stand-in plus merge patches, cluster-scoped InferencePolicies, and a log of every write."""

    def __init__(self, policies: list[dict[str, Any]] | None = None, forbidden: bool = False) -> None:
        super().__init__()
        self.policies = policies or []
        self.forbidden = forbidden
        self.writes: list[tuple[str, str, str]] = []

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        if kind == "InferencePolicy":
            return copy.deepcopy(self.policies), "1"
        return super().list(kind, namespace, labels=labels, fields=fields)

    def merge_patch(
        self, kind: str, name: str, namespace: str | None, patch: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        if self.forbidden:
            raise errors.Forbidden(f'cannot patch resource "inferenceprofiles" in the namespace "{namespace}"')
        self.writes.append(("patch" + (f"/{subresource}" if subresource else ""), kind, name))
        obj = self.objects[(kind, namespace or "", name)]
        _merge(obj, patch)
        return copy.deepcopy(obj)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        if "name" not in meta:  # generateName, as the API server fills it in
            obj = {**obj, "metadata": {**meta, "name": f"{meta['generateName']}{len(self.writes)}"}}
        self.writes.append(("create", obj["kind"], meta.get("name", meta.get("generateName", ""))))
        return super().create(obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("replace", obj["kind"], obj["metadata"]["name"]))
        return super().replace(obj)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        self.writes.append(("delete", kind, name))
        return super().delete(kind, name, namespace)


def inference_profile(**sections: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "m", "architecture": "llama-3-8b", "source": {"pvc": "models", "path": "/models/x"}},
        "engine": {"image": IMAGE, "maxModelLen": 4096},
        "hardware": {"gpu": "A100-80GB"},
    }
    spec.update(sections)
    return {
        "apiVersion": profiles.RESOURCE_API_VERSION,
        "kind": "InferenceProfile",
        "metadata": {"name": "llm", "namespace": NS, "generation": 1, "resourceVersion": "7", "uid": "u1"},
        "spec": json.loads(json.dumps(spec)),
    }


HOST_PATH = {"model": {"name": "m", "architecture": "llama-3-8b", "source": {"hostPath": "/etc"}}}


def reconciler(kube: Kube) -> tuple[controller._Reconciler, list[str]]:
    said: list[str] = []
    settings = controller.Settings(namespace=NS, lease_namespace=NS, lease_seconds=5, lock_ttl=30)
    leader = lock.ReleaseLock(kube, NS, controller.LEASE_RELEASE, "sa")  # type: ignore[arg-type]
    rec = controller._Reconciler(kube, settings, "sa", leader, lambda where, m: said.append(f"{where} {m}"))  # type: ignore[arg-type]
    return rec, said


def test_a_profile_the_safe_default_refuses_gets_a_stalled_status_and_an_event_and_nothing_else() -> None:
    kube = Kube()
    kube.create(inference_profile(**HOST_PATH))
    kube.writes.clear()
    rec, _ = reconciler(kube)

    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})

    assert kube.writes == [("patch/status", "InferenceProfile", "llm"), ("create", "Event", "llm.")]
    obj = kube.get("InferenceProfile", "llm", NS) or {}
    assert "finalizers" not in obj["metadata"], "validated before the finalizer"
    stalled = {c["type"]: c for c in obj["status"]["conditions"]}["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "policy")
    assert "model.source.hostPath '/etc'" in obj["status"]["failure"]["message"]
    event = next(o for (k, _, _), o in kube.objects.items() if k == "Event")
    assert event["reason"] == "PolicyRefused" and event["type"] == "Warning"

    kube.writes.clear()
    rec.reconcile_safely(obj)
    assert kube.writes == [], "said once per generation"


def test_a_policy_that_allows_it_lets_the_controller_go_on_to_its_finalizer() -> None:
    allows = {"metadata": {"name": "hostpath-ok"}, "spec": {"namespaces": [NS], "allowHostPath": True}}
    kube = Kube([allows])
    obj = inference_profile(**HOST_PATH)
    obj["status"] = {"observedGeneration": 1, "retry": None}  # judged already: nothing to deploy now
    kube.create(obj)
    kube.writes.clear()
    rec, _ = reconciler(kube)

    rec.reconcile_safely(obj)

    assert kube.writes == [("patch", "InferenceProfile", "llm")]
    assert (kube.get("InferenceProfile", "llm", NS) or {})["metadata"]["finalizers"] == [controller.FINALIZER]


def test_a_policy_object_that_does_not_validate_refuses_what_it_applies_to() -> None:
    kube = Kube([{"metadata": {"name": "broken"}, "spec": {"allowHostPath": "maybe"}}])
    kube.create(inference_profile())
    rec, _ = reconciler(kube)

    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})

    failure = (kube.get("InferenceProfile", "llm", NS) or {})["status"]["failure"]
    assert failure["class"] == "policy" and "InferencePolicy broken: spec.allowHostPath" in failure["message"]


def _deleting() -> dict[str, Any]:
    obj = inference_profile()
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj["metadata"]["finalizers"] = [controller.FINALIZER]
    return obj


def _workload() -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": NS, "labels": {"deployctl.dev/release": "llm"}},
    }


def _created_by_controller(kube: Kube) -> None:
    """Revision 1 written by the controller's identity ("sa"): only its own release is removed on delete."""
    from orchestrator.records import releases, writer

    writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                "llm",
                NS,
                manifests=b"",
                profile_text="",
                plan=None,
                model=releases.ModelRef(name="m", revision=None),
                image="i",
                profile_hash="h",
                actor={"user": "sa", "ci": {}},
            ),
            outcome="deployed",
            description="install",
        ),
        now=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    )


def test_deleting_an_object_removes_the_workload_under_the_release_lock() -> None:
    kube = Kube()
    kube.create(_deleting())
    kube.create(_workload())
    _created_by_controller(kube)
    kube.writes.clear()
    rec, _ = reconciler(kube)

    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})

    assert kube.writes[0] == ("create", "Lease", lock.lease_name("llm")), "the lock first"
    assert kube.writes.index(("delete", "Deployment", "llm")) < kube.writes.index(("replace", "Lease", "deployctl-llm"))
    assert kube.writes[-1] == ("patch", "InferenceProfile", "llm"), "the finalizer goes last"


def test_deleting_while_an_apply_holds_the_release_lock_deletes_nothing_and_tries_again_later() -> None:
    kube = Kube()
    kube.create(_deleting())
    kube.create(_workload())
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {"holderIdentity": "alice@ci", "leaseDurationSeconds": 60, "renewTime": now, "acquireTime": now}
    kube.create({"kind": "Lease", "metadata": {"name": "deployctl-llm", "namespace": NS}, "spec": held})
    kube.writes.clear()
    rec, said = reconciler(kube)

    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})

    assert kube.writes == [], "no delete under someone else's apply"
    assert ("team-a", "llm") in rec.retry_at and "locked by alice@ci" in said[-1]


def test_a_due_retry_is_done_once_the_object_went_through_any_way() -> None:
    kube = Kube()
    kube.create(inference_profile(**HOST_PATH))
    rec, _ = reconciler(kube)
    rec.retry_at[(NS, "llm")] = time.monotonic() - 1  # an earlier transient error, now due

    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})  # refused by policy this time

    assert rec.retry_at == {}, "else every object is queued again each second"


def test_an_object_in_a_namespace_not_opted_in_is_reported_once_and_not_put_on_retry() -> None:
    kube = Kube(forbidden=True)
    kube.create(inference_profile())
    rec, said = reconciler(kube)

    for _ in range(3):
        rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})

    assert len(said) == 1 and "not opted in" in said[0] and "--format controller-namespace" in said[0]
    assert rec.retry_at == {}


# --- workers ------------------------------------------------------------------------------------


def test_a_slow_object_holds_one_worker_and_the_others_go_on() -> None:
    work: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    stop, release_slow = threading.Event(), threading.Event()
    done: list[str] = []

    def reconcile(key: str) -> None:
        if key == "slow":
            release_slow.wait(10)
        done.append(key)

    workqueue.start_workers(work, 2, reconcile, stop, "test")
    try:
        work.add("slow")
        time.sleep(0.1)
        for key in ("a", "b", "c"):
            work.add(key)
        deadline = time.monotonic() + 5
        while len(done) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert done == ["a", "b", "c"], "the slow object held one worker only"
        assert work.active() == {"slow"}
    finally:
        release_slow.set()
        stop.set()


def test_one_object_is_never_reconciled_twice_at_once_and_a_change_meanwhile_is_looked_at_after() -> None:
    work: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    stop = threading.Event()
    running, most, calls = [0], [0], [0]
    guard = threading.Lock()

    def reconcile(key: str) -> None:
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
            calls[0] += 1
        time.sleep(0.2)
        with guard:
            running[0] -= 1

    workqueue.start_workers(work, 4, reconcile, stop, "test")
    try:
        work.add("llm")
        time.sleep(0.05)
        for _ in range(5):  # events while it is held: one more pass, not five, and never beside it
            work.add("llm")
        time.sleep(0.8)
        assert most[0] == 1 and calls[0] == 2
    finally:
        stop.set()


def test_a_closed_queue_hands_out_nothing() -> None:
    work: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    work.add("x")
    work.close()
    assert work.get(timeout=0.1) is None


@pytest.mark.parametrize("workers", [0, 65])
def test_the_controller_command_takes_1_to_64_workers(workers: int) -> None:
    result = CliRunner().invoke(cli.main, ["controller", "-n", NS, "--workers", str(workers)])
    assert result.exit_code == errors.ExitCode.USAGE and "--workers" in result.output


def test_the_workers_option_reaches_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[controller.Settings] = []
    monkeypatch.setattr(controller, "run", lambda settings, report: seen.append(settings))
    result = CliRunner().invoke(cli.main, ["controller", "-n", NS, "--workers", "7"])
    assert result.exit_code == 0, result.output
    assert seen[0].workers == 7 and controller.Settings(namespace=None, lease_namespace="x").workers == 4


def test_the_hosts_every_applicable_policy_allows_are_the_ones_the_controller_may_reach() -> None:
    a = policy.from_object({"metadata": {"name": "a"}, "spec": {"allowedGateHosts": ["Prom.Monitoring.svc.", "x"]}})
    b = policy.from_object({"metadata": {"name": "b"}, "spec": {"allowedGateHosts": ["prom.monitoring.svc"]}})
    other = policy.from_object({"metadata": {"name": "c"}, "spec": {"namespaces": ["elsewhere"]}})
    assert policy.allowed_gate_hosts([a, b, other], NS) == ("prom.monitoring.svc",)  # all that apply must allow
    assert policy.allowed_gate_hosts([a], NS) == ("prom.monitoring.svc", "x")
    assert policy.allowed_gate_hosts([other], NS) == ()  # none applies: the safe default allows none


def test_the_policys_allowed_hosts_reach_the_controllers_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    allows = {"metadata": {"name": "gate-hosts"}, "spec": {"namespaces": [NS], "allowedGateHosts": ["prom.mon.svc"]}}
    kube = Kube([allows])
    kube.create(inference_profile())
    seen: list[sequence.Options] = []

    def apply(prof: Any, text: str, options: sequence.Options, report: Any) -> None:
        seen.append(options)
        raise errors.Locked("held by someone else")  # stop here: the options are what this test reads

    monkeypatch.setattr(controller.pipeline, "apply", apply)
    rec, _ = reconciler(kube)
    rec.reconcile_safely(kube.get("InferenceProfile", "llm", NS) or {})
    assert [o.allowed_gate_hosts for o in seen] == [("prom.mon.svc",)]
