"""The CLI with click's CliRunner, no cluster: options reach the library, output and exit codes.

Cluster commands are checked at the library entry the CLI calls (``orchestrator.apply.pipeline.apply``,
``orchestrator.apply.views.status``, …), replaced by a fake that records what it was given: each
option, and its ``DEPLOYCTL_<COMMAND>_<OPTION>`` environment variable, must arrive in the
:class:`orchestrator.apply.sequence.Options` (or arguments) the library receives.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator import errors
from orchestrator.apply import gitops, pipeline, sequence, views
from orchestrator.apply import outcome as outcome_mod
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.gate import verdict as gate
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROD = ROOT / "profiles" / "prod-tp4.yaml"
DEV = ROOT / "profiles" / "dev-tp2.yaml"


def run(*args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), env=env, prog_name="deployctl")


def variant(tmp_path: pathlib.Path, old: str, new: str, source: pathlib.Path = PROD) -> pathlib.Path:
    """A copy of an example profile with one line changed."""
    text = source.read_text()
    assert old in text
    path = tmp_path / f"variant-{source.name}"
    path.write_text(text.replace(old, new, 1))
    return path


class Recorder:
    """Stands in for a library entry: records each call's arguments and returns ``result``."""

    def __init__(self, result: Any = None, raises: errors.DeployctlError | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result = result
        self.raises = raises

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        if self.raises is not None:
            raise self.raises
        return self.result

    @property
    def options(self) -> sequence.Options:
        found = [a for a in self.calls[-1] if isinstance(a, sequence.Options)]
        assert len(found) == 1, self.calls
        return found[0]


PASSED_GATE = gate.GateReport(
    gate.Verdict.PASS,
    tuple(gate.Check(f"check{i}", "<=1", 0.5, gate.Verdict.PASS, "ok") for i in range(5)),
    {},
    {},
)


def outcome(result: outcome_mod.Result = "deployed", failure: outcome_mod.Failure | None = None) -> pipeline.Outcome:
    return pipeline.Outcome(
        result,
        "llama3-8b-dev",
        "inference-dev",
        "revision 1 of llama3-8b-dev is deployed (install)",
        revision=1,
        failure=failure,
        timings={"apply": 0.5},
        gate=PASSED_GATE,
        warnings=["a warning"],
    )


@pytest.fixture
def fake_apply(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder(outcome())

    def apply(prof: profile.Profile, text: str, options: sequence.Options, report: Any) -> Any:
        report("apply", "progress that must not reach stdout")
        return recorder(prof, text, options, report)

    monkeypatch.setattr(pipeline, "apply", apply)
    return recorder


# --- options reach the library ---------------------------------------------------------------


def test_apply_passes_every_option_to_the_pipeline(fake_apply: Recorder) -> None:
    result = run(
        "apply",
        str(DEV),
        "--kubeconfig",
        "/etc/kube/ci.yaml",
        "--context",
        "prod-eu",
        "--endpoint",
        "http://infer.internal:8000",
        "--allow-gate-host",
        "infer.internal",
        "--allow-gate-host",
        "lb.internal",
        "--no-rollback",
        "--skip-bench",
        "--timeout",
        "90",
        "--create-namespace",
        "--adopt",
        "--lock-ttl",
        "120",
    )
    assert result.exit_code == 0, result.output
    prof, text, options, _ = fake_apply.calls[0]
    assert prof.metadata.name == "llama3-8b-dev" and text == DEV.read_text()
    assert (options.kubeconfig, options.context, options.endpoint) == (
        "/etc/kube/ci.yaml",
        "prod-eu",
        "http://infer.internal:8000",
    )
    assert options.rollback is False and options.skip_bench is True and options.create_namespace is True
    assert options.timeout == 90.0 and options.lock_ttl == 120 and options.adopt is True
    assert options.allowed_gate_hosts == ("infer.internal", "lb.internal")


def test_apply_defaults_roll_back_bench_and_wait_for_the_profiles_deadline(fake_apply: Recorder) -> None:
    assert run("apply", str(DEV)).exit_code == 0
    options = fake_apply.options
    assert (options.kubeconfig, options.context, options.endpoint, options.timeout) == (None, None, None, None)
    assert options.rollback is True and options.skip_bench is False and options.create_namespace is False
    assert options.lock_ttl == 60 and options.adopt is False  # never takes over unless asked
    assert options.allowed_gate_hosts == ()


def test_apply_options_come_from_deployctl_environment_variables(fake_apply: Recorder) -> None:
    env = {
        "DEPLOYCTL_APPLY_KUBECONFIG": "/etc/kube/from-env.yaml",
        "DEPLOYCTL_APPLY_CONTEXT": "ci",
        "DEPLOYCTL_APPLY_SKIP_BENCH": "true",
        "DEPLOYCTL_APPLY_NO_ROLLBACK": "1",
        "DEPLOYCTL_APPLY_LOCK_TTL": "30",
        "DEPLOYCTL_APPLY_TIMEOUT": "45",
        "CI_JOB_ID": "4711",
    }
    assert run("apply", str(DEV), env=env).exit_code == 0
    options = fake_apply.options
    assert (options.kubeconfig, options.context) == ("/etc/kube/from-env.yaml", "ci")
    assert options.skip_bench is True and options.rollback is False
    assert options.lock_ttl == 30 and options.timeout == 45.0
    assert options.environ["CI_JOB_ID"] == "4711"  # the release record's actor reads CI variables


def test_a_command_line_option_beats_its_environment_variable(fake_apply: Recorder) -> None:
    result = run("apply", str(DEV), "--lock-ttl", "90", env={"DEPLOYCTL_APPLY_LOCK_TTL": "30"})
    assert result.exit_code == 0, result.output
    assert fake_apply.options.lock_ttl == 90


def test_gate_passes_its_options_to_the_gitops_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(outcome())
    monkeypatch.setattr(gitops, "gate", recorder)
    result = run(
        "gate",
        str(DEV),
        "--kubeconfig",
        "k.yaml",
        "--context",
        "c",
        "--endpoint",
        "http://lb:8000",
        "--allow-gate-host",
        "lb",
        "--skip-bench",
        "--timeout",
        "30",
        "--lock-ttl",
        "15",
        env={"DEPLOYCTL_GATE_KUBECONFIG": "ignored.yaml"},
    )
    assert result.exit_code == 0, result.output
    prof, text, options, _ = recorder.calls[0]
    assert prof.metadata.name == "llama3-8b-dev" and text == DEV.read_text()
    assert (options.kubeconfig, options.context, options.endpoint) == ("k.yaml", "c", "http://lb:8000")
    assert options.skip_bench is True and options.timeout == 30.0 and options.lock_ttl == 15
    assert options.allowed_gate_hosts == ("lb",)


def test_rollback_passes_release_namespace_revision_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(outcome())
    monkeypatch.setattr(pipeline, "rollback", recorder)
    result = run(
        "rollback",
        "llm",
        "-n",
        "team-a",
        "--to",
        "3",
        "--kubeconfig",
        "k.yaml",
        "--context",
        "c",
        "--endpoint",
        "http://lb:8000",
        "--allow-gate-host",
        "lb",
        "--timeout",
        "60",
        "--lock-ttl",
        "20",
    )
    assert result.exit_code == 0, result.output
    name, namespace, to, options, _ = recorder.calls[0]
    assert (name, namespace, to) == ("llm", "team-a", 3)
    assert (options.kubeconfig, options.context, options.endpoint) == ("k.yaml", "c", "http://lb:8000")
    assert options.timeout == 60.0 and options.lock_ttl == 20 and options.allowed_gate_hosts == ("lb",)


@pytest.mark.parametrize(
    "command, entry, result",
    [
        ("history", "history", [{"revision": 1, "status": "deployed"}]),
        ("status", "status", {"release": "llm", "live_revision": 2}),
    ],
)
def test_read_only_release_views_get_cluster_options_name_and_namespace(
    monkeypatch: pytest.MonkeyPatch, command: str, entry: str, result: Any
) -> None:
    recorder = Recorder(result)
    monkeypatch.setattr(views, entry, recorder)
    env = {f"DEPLOYCTL_{command.upper()}_CONTEXT": "from-env"}
    out = run(command, "llm", "-n", "team-a", "--kubeconfig", "k.yaml", "--output", "json", env=env)
    assert out.exit_code == 0, out.output
    options, name, namespace = recorder.calls[0]
    assert (options.kubeconfig, options.context, name, namespace) == ("k.yaml", "from-env", "llm", "team-a")
    assert json.loads(out.stdout) == result


def test_inventory_and_diff_get_the_cluster_options(monkeypatch: pytest.MonkeyPatch) -> None:
    pools = Recorder([{"product": "NVIDIA-A100", "nvlink": True, "nodes": 2, "gpus_total": 8, "gpus_free": 4}])
    monkeypatch.setattr(views, "inventory", pools)
    assert run("inventory", "--kubeconfig", "k.yaml", "--context", "c").exit_code == 0
    assert (pools.options.kubeconfig, pools.options.context) == ("k.yaml", "c")

    changed = {"kind": "Deployment", "name": "x", "namespace": "default", "change": "update"}
    changes = Recorder([{**changed, "diff": "--- live/Deployment/x\n+++ profile/Deployment/x\n"}])
    monkeypatch.setattr(views, "diff_objects", changes)
    result = run("diff", str(DEV), "--kubeconfig", "k.yaml")
    assert result.exit_code == 11  # 11: there are changes (1 is a usage error)
    assert changes.options.kubeconfig == "k.yaml" and changes.calls[0][1].metadata.name == "llama3-8b-dev"


def test_audit_verify_passes_its_files_and_exits_9_on_a_broken_chain(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    export = tmp_path / "export.json"
    export.write_text("{}")
    broken = {"ok": False, "records": 2, "head": "ab" * 32, "problems": [{"revision": 1, "message": "edited"}]}
    recorder = Recorder(broken)
    monkeypatch.setattr(views, "audit_verify", recorder)
    result = run("audit", "verify", "llm", "-n", "team-a", "--against", str(export), "--kubeconfig", "k.yaml")
    assert result.exit_code == ExitCode.AUDIT_FAILED, result.output
    options, name, namespace, export_file, against = recorder.calls[0]
    assert (options.kubeconfig, name, namespace, export_file, against) == (
        "k.yaml",
        "llm",
        "team-a",
        None,
        str(export),
    )
    assert "revision 1: edited" in result.stdout


def test_audit_verify_without_a_release_or_a_file_is_a_usage_error() -> None:
    result = run("audit", "verify")
    assert result.exit_code == ExitCode.USAGE
    assert "--file" in result.stderr


def test_apply_output_json_prints_exactly_one_json_object_on_stdout(fake_apply: Recorder) -> None:
    result = run("apply", str(DEV), "--output", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the whole of stdout: one object, nothing before or after
    assert data == outcome().to_json()
    assert "progress that must not reach stdout" not in result.stdout
    assert "[apply] +" in result.stderr and "progress that must not reach stdout" in result.stderr


def test_apply_text_output_says_result_gate_timings_and_warnings(fake_apply: Recorder) -> None:
    result = run("apply", str(DEV), env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "DEPLOYED: revision 1 of llama3-8b-dev is deployed (install)"
    assert "  smoke gate: pass: all 5 checks passed" in lines
    assert "  timings: apply 0.5s" in lines and "  warning: a warning" in lines


def test_a_failed_outcome_exits_with_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pipeline,
        "apply",
        Recorder(outcome("rolled_back", outcome_mod.Failure("slo_failed", "p95_ttft_ms missed", "smoke"))),
    )
    result = run("apply", str(DEV), "--output", "json")
    assert result.exit_code == 6
    assert json.loads(result.stdout)["exit_code"] == 6


@pytest.mark.parametrize(
    "error",
    [errors.Locked("release llm is locked by alice"), errors.ClusterError("cluster unreachable")],
)
def test_a_library_error_is_one_json_object_on_stdout_and_a_message_on_stderr(
    monkeypatch: pytest.MonkeyPatch, error: errors.DeployctlError
) -> None:
    monkeypatch.setattr(pipeline, "apply", Recorder(raises=error))
    result = run("apply", str(DEV), "--output", "json")
    assert result.exit_code == error.exit_code
    assert json.loads(result.stdout) == {"error": error.message, "exit_code": int(error.exit_code)}
    assert error.message in result.stderr


def test_status_text_is_the_formatted_view(monkeypatch: pytest.MonkeyPatch) -> None:
    data = {
        "release": "llm",
        "namespace": "team-a",
        "live_revision": 2,
        "live_description": "upgrade from revision 1",
        "image": "img",
        "replicas": {"ready": 1, "desired": 1},
        "pods": [],
        "gate": {"verdict": "pass", "summary": "pass: all 3 checks passed"},
        "last_failure": None,
        "revisions": 2,
    }
    monkeypatch.setattr(views, "status", Recorder(data))
    result = run("status", "llm", "-n", "team-a")
    assert result.exit_code == 0, result.output
    assert result.stdout == views.format_status(data) + "\n"
    assert "gate: pass" in result.stdout


# --- profile commands: exit codes ----------------------------------------------------------


def test_validate_a_profile_that_fits_exits_0() -> None:
    result = run("validate", str(PROD))
    assert result.exit_code == 0, result.output
    assert "valid; fits" in result.stdout


def test_validate_and_plan_a_profile_vllm_would_refuse_exit_2_with_the_line(tmp_path: pathlib.Path) -> None:
    bad = variant(tmp_path, "tensorParallelSize: 4", "tensorParallelSize: 3")
    for command in ("validate", "plan"):
        result = run(command, str(bad))
        assert result.exit_code == ExitCode.INVALID_PROFILE, (command, result.output)
        assert "engine.tensorParallelSize (line 20)" in result.stderr


def test_a_mistyped_profile_key_exits_2_with_a_suggestion(tmp_path: pathlib.Path) -> None:
    bad = variant(tmp_path, "tensorParallelSize: 4", "tensorParalelSize: 4")
    result = run("validate", str(bad))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "did you mean 'tensorParallelSize'?" in result.stderr


def test_validate_and_plan_a_profile_that_does_not_fit_exit_3(tmp_path: pathlib.Path) -> None:
    tp1 = variant(tmp_path, "tensorParallelSize: 4", "tensorParallelSize: 1")
    validate = run("validate", str(tp1))
    assert validate.exit_code == ExitCode.DOES_NOT_FIT, validate.output
    assert "does NOT fit" in validate.stdout
    plan = run("plan", str(tp1), "--output", "json")
    assert plan.exit_code == ExitCode.DOES_NOT_FIT, plan.output
    data = json.loads(plan.stdout)
    assert data["fits"] is False
    assert "weights-do-not-fit" in [f["code"] for f in data["findings"]]


def test_plan_of_a_profile_that_fits_exits_0_with_its_numbers() -> None:
    result = run("plan", str(PROD), "--output", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is True and data["max_concurrency"] > 0


def test_validate_output_json_of_an_invalid_profile_is_one_error_object(tmp_path: pathlib.Path) -> None:
    bad = variant(tmp_path, "tensorParallelSize: 4", "tensorParallelSize: 3")
    result = run("validate", str(bad), "--output", "json")
    assert result.exit_code == ExitCode.INVALID_PROFILE
    data = json.loads(result.stdout)
    assert data["exit_code"] == 2 and "tensorParallelSize" in data["error"]


def test_a_missing_profile_file_is_a_usage_error_exit_1() -> None:
    result = run("validate", "no/such/profile.yaml")
    assert result.exit_code == ExitCode.USAGE
    assert "does not exist" in result.stderr


# --- usage ---------------------------------------------------------------------------------


def test_a_mistyped_command_suggests_the_closest_one() -> None:
    result = run("aply", str(DEV))
    assert result.exit_code != 0
    assert "no such command 'aply'. Did you mean 'apply'?" in result.stderr


@pytest.mark.parametrize(
    "args",
    [("aply", "p.yaml"), ("validate",), ("apply", str(DEV), "--lock-ttl", "2"), ("--bogus",)],
)
def test_usage_errors_exit_1_not_the_invalid_profile_code(args: tuple[str, ...]) -> None:
    assert run(*args).exit_code == ExitCode.USAGE


def test_version_names_deployctl_vllm_and_kubernetes() -> None:
    result = run("version", "--output", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["deployctl"] == cli.VERSION and data["default_vllm"] == profile.DEFAULT_VLLM_VERSION
    assert data["default_vllm"] in data["vllm_flag_sets"] and data["kubernetes"] == cli.SUPPORTED_KUBERNETES
    text = run("version")
    assert text.stdout.startswith(f"deployctl {cli.VERSION}\n")
    assert run("--version").stdout.strip() == f"deployctl, version {cli.VERSION}"


def test_completion_bash_prints_a_script_whose_variable_completes_commands() -> None:
    script = run("completion", "bash")
    assert script.exit_code == 0
    assert "_DEPLOYCTL_COMPLETE=bash_complete" in script.stdout
    assert "complete -o nosort -F _deployctl_completion deployctl" in script.stdout
    # What the script asks the program when the user types `deployctl ap<TAB>`.
    answer = run(env={"_DEPLOYCTL_COMPLETE": "bash_complete", "COMP_WORDS": "deployctl ap", "COMP_CWORD": "1"})
    assert answer.stdout.split() == ["plain,apply"]


def test_completion_refuses_an_unknown_shell() -> None:
    result = run("completion", "tcsh")
    assert result.exit_code != 0 and "tcsh" in result.stderr


# --- render --------------------------------------------------------------------------------


def test_render_out_dir_writes_one_file_per_object_matching_stdout(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    result = run("render", str(PROD), "--output-dir", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.yaml"))
    assert [f.name for f in files] == [
        "00-serviceaccount-llama3-70b.yaml",
        "01-networkpolicy-llama3-70b.yaml",
        "02-service-llama3-70b.yaml",
        "03-poddisruptionbudget-llama3-70b.yaml",
        "04-deployment-llama3-70b.yaml",
    ]
    assert all(f"wrote {f}" in result.stderr for f in files)
    from_files = [yaml.safe_load(f.read_text()) for f in files]
    stdout = run("render", str(PROD)).stdout
    assert from_files == [d for d in yaml.safe_load_all(stdout) if d]
    again = tmp_path / "again"
    assert run("render", str(PROD), "--output-dir", str(again)).exit_code == 0
    assert all(f.read_bytes() == (again / f.name).read_bytes() for f in files)  # deterministic bytes


def test_render_helm_values_are_the_libraries_values_for_the_chart(tmp_path: pathlib.Path) -> None:
    result = run("render", str(PROD), "--format", "helm-values")
    assert result.exit_code == 0, result.output
    values = yaml.safe_load(result.stdout)
    assert values == json.loads(json.dumps(render.helm_values(profile.load(PROD), planner.plan(profile.load(PROD)))))
    chart_keys = set(yaml.safe_load((ROOT / "charts" / "vllm-inference" / "values.yaml").read_text()))
    assert set(values) <= chart_keys
    assert values["fullnameOverride"] == "llama3-70b"
    assert values["image"]["reference"].endswith(
        "@sha256:" + "4f1c7b0d3a5e6f8a9b2c1d0e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a"
    )
    written = run("render", str(PROD), "--format", "helm-values", "--output-dir", str(tmp_path / "values"))
    assert written.exit_code == 0
    assert (tmp_path / "values" / "values.yaml").read_text() == result.stdout


def test_render_refuses_a_profile_vllm_would_refuse(tmp_path: pathlib.Path) -> None:
    bad = variant(tmp_path, "tensorParallelSize: 4", "tensorParallelSize: 3")
    result = run("render", str(bad), "--output-dir", str(tmp_path / "out"))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert not (tmp_path / "out").exists()


def test_apply_with_a_foreign_gate_endpoint_exits_2_before_it_reads_a_kubeconfig(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(DEV.read_text().replace("\ngate:\n", "\ngate:\n  endpoint: http://collector.example:80/x\n", 1))
    result = run("apply", str(profile), "--kubeconfig", str(tmp_path / "absent"))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "collector.example is not the release's own Service" in result.stderr
    assert "--allow-gate-host collector.example" in result.stderr
