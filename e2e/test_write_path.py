"""The write path cannot be crashed by its own input: every step after the first write, made to
raise, ends recorded and restored; a lost lock stops the apply; --dry-run writes nothing; the
GitOps gate records what the GitOps tool applied and exits 10 when the gate fails.

The injection runs the real CLI in this process (click's CliRunner) against the real control
plane, with one step replaced by a one-shot wrapper that raises after (or instead of) the step.
"""

from __future__ import annotations

import base64
import gzip
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click.testing
import hypothesis
import kubernetes
import pytest
import yaml
from deployhelpers import ReleaseEnv, deployctl, exists, profile, start_deployctl, wait_until, write_profile
from hypothesis import strategies as st

from orchestrator.apply import applyset, health, rollout
from orchestrator.cli import app as cli
from orchestrator.gate import bench
from orchestrator.gate import verdict as gate
from orchestrator.kube import portforward
from orchestrator.plan import planner
from orchestrator.profile import slo
from orchestrator.records import writer

# --- an exception in every step after the first write ---------------------------------------


class Injected(RuntimeError):
    """The unexpected exception: not one of ours, so nothing but the pipeline's guard catches it."""


def _once(real: Callable[..., Any], *, after: bool, when: Callable[..., bool] = lambda *a, **k: True) -> Any:
    """``real``, except that its first matching call raises Injected (after running, if ``after``)."""
    fired = threading.Event()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if fired.is_set() or not when(*args, **kwargs):
            return real(*args, **kwargs)
        fired.set()
        if after:
            real(*args, **kwargs)
        raise Injected("injected fault")

    return wrapper


# step -> (module, attribute, raise after the real call?, which calls). The first write is the
# server-side apply of the revision's objects; these are every step from its end to the record.
STEPS: dict[str, tuple[Any, str, bool, Callable[..., bool]]] = {
    "apply": (applyset, "apply", True, lambda *a, **k: True),
    "rollout watch": (rollout, "watch_rollout", False, lambda *a, **k: True),
    "port-forward": (portforward.PortForwarder, "__enter__", False, lambda *a, **k: True),
    "health": (health, "wait_healthy", False, lambda *a, **k: True),
    "smoke benchmark": (bench, "run", False, lambda *a, **k: True),
    "verdict": (gate, "evaluate", False, lambda *a, **k: True),
    "record": (writer, "append", False, lambda kube, new, **k: new.outcome == "deployed"),
}


def _cli(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl", env={"NO_COLOR": "1"})


@pytest.mark.parametrize("step", list(STEPS))
def test_an_exception_in_any_step_after_the_first_write_is_recorded_and_restored(
    env: ReleaseEnv, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    good = write_profile(env.tmp, profile(env.namespace), "good.yaml")
    assert _cli("apply", str(good), "--kubeconfig", str(env.kubeconfig), "--output", "json").exit_code == 0
    live_hash = env.deployment().metadata.annotations["deployctl.dev/profile-hash"]
    upgrade = write_profile(env.tmp, profile(env.namespace, engine={"maxNumSeqs": 16}), "upgrade.yaml")
    module, attribute, after, when = STEPS[step]
    monkeypatch.setattr(module, attribute, _once(getattr(module, attribute), after=after, when=when))
    plans: list[object] = []
    real_plan = planner.plan
    monkeypatch.setattr(planner, "plan", lambda prof, *rest: plans.append(prof) or real_plan(prof, *rest))

    result = _cli("apply", str(upgrade), "--kubeconfig", str(env.kubeconfig), "--output", "json")

    assert not isinstance(result.exception, Injected), f"{step}: the exception escaped"
    assert result.exit_code == 5, result.output
    out = yaml.safe_load(result.stdout)
    assert out["result"] == "rolled_back" and out["failure"]["class"] == "internal_error", out
    assert "Injected: injected fault" in out["failure"]["message"] and "Traceback" not in result.output
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "failed"), (3, "deployed")]
    assert env.record(2)["failure"]["class"] == "internal_error"
    verified = deployctl(env.kubeconfig, "audit", "verify", "llm", "-n", env.namespace)
    assert verified.code == 0, verified.stdout + verified.stderr
    assert env.deployment().metadata.annotations["deployctl.dev/profile-hash"] == live_hash
    assert len(plans) == 1, "the planner runs once per apply; its Plan travels to render and the record"


def test_a_lost_lock_stops_the_apply_and_restores(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    slow = profile(
        env.namespace, engine={"maxNumSeqs": 16}, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "20s"}}
    )
    path = write_profile(env.tmp, slow, "slow.yaml")
    log = env.tmp / "a.log"
    proc = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", "--lock-ttl", "6", log=log)
    leases = kubernetes.client.CoordinationV1Api(env.api)
    wait_until(lambda: _rs_count(env) >= 2, 30, "the upgrade's rollout to start")
    lease = leases.read_namespaced_lease("deployctl-llm", env.namespace)
    lease.spec.holder_identity = "someone-else"
    leases.replace_namespaced_lease("deployctl-llm", env.namespace, lease)
    assert proc.wait(timeout=120) == 4, log.read_text()
    out = _json_in(log)
    assert out["result"] == "rolled_back" and out["failure"]["class"] == "lock_lost", out
    assert "someone-else" in out["failure"]["message"]
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "failed"), (3, "deployed")]


def _rs_count(env: ReleaseEnv) -> int:
    sets = kubernetes.client.AppsV1Api(env.api).list_namespaced_replica_set(env.namespace)
    return len(sets.items)


def _json_in(log: Path) -> Any:
    """The JSON outcome in a log that also holds the progress lines (stdout and stderr together)."""
    text = log.read_text()
    return yaml.safe_load(text[text.index("\n{") + 1 :] if not text.startswith("{") else text)


# --- the order of the steps -----------------------------------------------------------------------


def test_a_refused_apply_does_not_create_the_namespace(env: ReleaseEnv) -> None:
    missing = f"{env.namespace}-new"[:63]
    nowhere = profile(missing, placement={"nodeSelector": {"pool": "does-not-exist"}})
    result = env.apply(nowhere, "--create-namespace")
    assert result.code == 5 and result.json["result"] == "refused", result.stdout + result.stderr
    assert not exists(lambda: kubernetes.client.CoreV1Api(env.api).read_namespace(missing))


# --- apply --dry-run ----------------------------------------------------------------------------


def test_dry_run_says_what_would_change_and_writes_nothing(env: ReleaseEnv) -> None:
    first = env.apply(profile(env.namespace), "--dry-run")
    assert first.code == 0, first.stdout + first.stderr
    assert first.json["result"] == "dry_run" and {c["action"] for c in first.json["changes"]} == {"create"}
    assert "strategy" in first.json["message"] and "Nothing was written" in first.json["message"]
    _assert_nothing_written(env)
    assert env.apply(profile(env.namespace)).code == 0
    changed = env.apply(profile(env.namespace, engine={"maxNumSeqs": 16}), "--dry-run")
    assert changed.code == 0, changed.stdout + changed.stderr
    actions = {c["object"]: c["action"] for c in changed.json["changes"]}
    assert actions["Deployment/llm"] == "update" and actions["Service/llm"] == "unchanged", actions
    assert [r["revision"] for r in env.history()] == [1]


def _assert_nothing_written(env: ReleaseEnv) -> None:
    core = kubernetes.client.CoreV1Api(env.api)
    assert env.deployment() is None
    assert not core.list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/release-record").items
    assert not kubernetes.client.CoordinationV1Api(env.api).list_namespaced_lease(env.namespace).items


# Valid profiles, generated: each section varied within what the schema accepts, so that the
# whole apply path up to the server's dry-run meets combinations no example has.
_FIELDS = st.fixed_dictionaries(
    {
        "engine": st.fixed_dictionaries(
            {
                "tensorParallelSize": st.sampled_from([1, 2, 4]),
                "maxModelLen": st.sampled_from([512, 2048, 4096, 8192]),
                "maxNumSeqs": st.integers(min_value=1, max_value=512),
                "kvCacheDtype": st.sampled_from(["auto", "fp8"]),
                "gpuMemoryUtilization": st.floats(min_value=0.5, max_value=0.98),
                "enablePrefixCaching": st.booleans(),
            }
        ),
        "rollout": st.fixed_dictionaries(
            {
                "replicas": st.integers(min_value=1, max_value=3),
                "strategy": st.sampled_from(["auto", "surge", "no-surge", "recreate"]),
                "allowDowntime": st.booleans(),
            }
        ),
        "airgap": st.fixed_dictionaries({"offline": st.booleans(), "denyEgress": st.booleans()}),
        "slo": st.dictionaries(
            st.sampled_from(list(slo.METRIC_NAMES)),
            st.tuples(st.sampled_from(slo.OPERATORS), st.floats(min_value=0, max_value=1e6)).map(
                lambda t: f"{t[0]}{t[1]:g}"
            ),
            max_size=4,
        ),
        "labels": st.dictionaries(
            st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.text("abc-_.", max_size=8), max_size=3
        ),
    }
)
DRY_RUN_EXAMPLES = int(os.environ.get("DEPLOYCTL_DRY_RUN_EXAMPLES", "60"))


def test_generated_valid_profiles_dry_run_to_a_verdict_never_a_traceback(env: ReleaseEnv) -> None:
    seen: dict[int, int] = {}

    @hypothesis.settings(max_examples=DRY_RUN_EXAMPLES, deadline=None, database=None)
    @hypothesis.given(fields=_FIELDS)
    def dry_run(fields: dict[str, Any]) -> None:
        doc = profile(env.namespace, engine=fields["engine"], rollout=fields["rollout"], airgap=fields["airgap"])
        doc["metadata"]["labels"] = {k: v.strip("-_.") or "x" for k, v in fields["labels"].items()}
        doc["gate"]["smoke"]["slo"] = fields["slo"]
        path = write_profile(env.tmp, doc, "fuzz.yaml")
        result = _cli("apply", str(path), "--dry-run", "--kubeconfig", str(env.kubeconfig), "--output", "json")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"uncaught {type(result.exception).__name__}") from result.exception
        assert result.exit_code in (0, 2, 3, 5), result.output
        assert "Traceback" not in result.output
        seen[result.exit_code] = seen.get(result.exit_code, 0) + 1

    dry_run()
    _assert_nothing_written(env)
    assert seen.get(0, 0) > 0, seen  # the generator reaches the server's dry-run, not only refusals
    print(f"dry-run fuzz: {sum(seen.values())} profiles, exits {dict(sorted(seen.items()))}")


# --- the GitOps gate ----------------------------------------------------------------------------


@pytest.fixture
def synced(env: ReleaseEnv) -> Iterator[Path]:
    """The profile, with its render applied as a GitOps tool would, plus a label only the tool adds."""
    path = write_profile(env.tmp, profile(env.namespace))
    out = env.tmp / "out"
    assert deployctl(env.kubeconfig, "render", str(path), "--output-dir", str(out)).code == 0
    for file in sorted(out.glob("*.yaml")):
        doc = yaml.safe_load(file.read_text())
        doc["metadata"].setdefault("labels", {})["gitops.example/synced-by"] = "flux"
        kubernetes.utils.create_from_dict(env.api, doc)
    yield path


def test_gitops_gate_records_the_bytes_the_gitops_tool_applied(env: ReleaseEnv, synced: Path) -> None:
    result = deployctl(env.kubeconfig, "gate", str(synced), "--output", "json", "--timeout", "90")
    assert result.code == 0, result.stdout + result.stderr
    stored = _stored_manifests(env, 1)
    assert stored.count("gitops.example/synced-by: flux") >= 4  # every object, as the tool applied it
    assert "managedFields" not in stored and "resourceVersion" not in stored
    # The stored bytes are what a rollback re-applies: they must apply as they are.
    assert deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1").code == 0


def test_a_failed_gitops_gate_exits_10_and_rolls_nothing_back(
    env: ReleaseEnv, synced: Path, simulator: Callable[..., Any]
) -> None:
    slow = simulator(model="sim-model", ttft_ms=900, itl_ms=5)  # p95 TTFT 900 ms against "<=500"
    result = deployctl(
        env.kubeconfig, "gate", str(synced), "--output", "json", "--timeout", "90", "--endpoint", slow.url
    )
    assert result.code == 10, result.stdout + result.stderr
    assert result.json["result"] == "gate_failed" and result.json["failure"]["class"] == "slo_failed"
    assert env.deployment() is not None  # GitOps owns the objects: nothing was rolled back
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "failed")]


def _stored_manifests(env: ReleaseEnv, revision: int) -> str:
    cm = kubernetes.client.CoreV1Api(env.api).read_namespaced_config_map(f"deployctl.llm.v{revision}", env.namespace)
    return gzip.decompress(base64.b64decode(cm.binary_data["manifests.yaml.gz"])).decode()
