"""The habits users bring from kubectl, Helm and `vllm bench serve`, typed as a user types them.

`-o/--output` formats, the namespace rule, `DEPLOYCTL_<COMMAND>_<OPTION>` variables, durations,
a profile on standard input, `--set`, help and completion, colour. Each test drives the CLI with
click's CliRunner; cluster commands stop at the library entry they call (replaced by a recorder),
and everything before it (option parsing, the kubeconfig, the profile) is real.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any

import click
import click.testing
import pytest
import yaml
from click.core import ParameterSource

from orchestrator import output
from orchestrator.apply import gitops, pipeline, views
from orchestrator.cli import app as cli
from orchestrator.cli import options as cli_options
from orchestrator.engines import vllm_flags
from orchestrator.errors import ExitCode
from orchestrator.profile import model as profile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEV = ROOT / "profiles" / "dev-tp2.yaml"  # metadata.namespace: inference-dev
PROD = ROOT / "profiles" / "prod-tp4.yaml"
CLI_DOC = ROOT / "docs" / "cli.md"
# Read before the hermetic fixture clears DEPLOYCTL_* variables: rewrite the generated docs table.
UPDATE = bool(os.environ.get("DEPLOYCTL_UPDATE_GOLDEN"))

# Commands that print data, and so take -o/--output.
PRINTS_DATA = {
    "engine-flags list",
    "validate",
    "plan",
    "render",
    "apply",
    "gate",
    "diff",
    "rollback",
    "history",
    "status",
    "inventory",
    "audit verify",
    "audit export",
    "audit trust",
    "keygen",
    "bench",
    "version",
    "schema",
    "uninstall",
    "rollout status",
    "rollout promote",
    "rollout abort",
    "rollout pause",
    "rollout resume",
}


LEAKY = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NO_COLOR", "FORCE_COLOR", "TERM")


@pytest.fixture(autouse=True)
def hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """No kubeconfig, namespace or colour setting of the machine running the tests leaks in."""
    for name in list(os.environ):
        if name.startswith("DEPLOYCTL_") or name in (
            "KUBECONFIG",
            "NO_COLOR",
            "FORCE_COLOR",
            "KUBERNETES_SERVICE_HOST",
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(*args: str, env: dict[str, str] | None = None, input: str | bytes | None = None) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), env=env, input=input, prog_name="deployctl")


class Recorder:
    """Stands in for a library entry: records its arguments, returns ``result``."""

    def __init__(self, result: Any = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result = result

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.result


def deployed() -> pipeline.Outcome:
    return pipeline.Outcome("deployed", "llama3-8b-dev", "inference-dev", "revision 1 is deployed", revision=1)


@pytest.fixture
def fake_apply(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder(deployed())
    monkeypatch.setattr(pipeline, "apply", lambda prof, text, options, report: recorder(prof, text, options))
    return recorder


def without_namespace(tmp_path: pathlib.Path) -> pathlib.Path:
    text = DEV.read_text()
    assert "  namespace: inference-dev\n" in text
    path = tmp_path / "no-namespace.yaml"
    path.write_text(text.replace("  namespace: inference-dev\n", ""))
    return path


def kubeconfig(path: pathlib.Path, current: str | None, contexts: dict[str, str | None]) -> pathlib.Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": name, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts.items()
        ],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


# --- 1. -o/--output chooses the format --------------------------------------------------------------


def test_every_command_that_prints_data_takes_dash_o_with_one_vocabulary() -> None:
    for path, cmd in cli_options.walk(cli.main):
        name = " ".join(path)
        opts = {o for p in cmd.params for o in p.opts}
        if name not in PRINTS_DATA:
            assert "-o" not in opts, f"{name} takes -o but prints no data"
            continue
        option = next(p for p in cmd.params if "-o" in p.opts)
        assert "--output" in option.opts, name
        assert isinstance(option.type, cli_options.Format), name
        assert set(option.type.choices) <= {"text", "json", "yaml"}, name
        assert "json" in option.type.choices, name


def test_plan_prints_its_table_as_text_and_table_still_works_with_a_warning() -> None:
    text = run("plan", str(PROD), "-o", "text")
    old = run("plan", str(PROD), "--output", "table")
    assert text.exit_code == old.exit_code == 0, old.output
    assert text.stdout == old.stdout and "KV cache" in text.stdout
    assert "deprecated" in old.stderr and "--output text" in old.stderr
    assert "[text|json|yaml]" in run("plan", "--help").stdout  # table is hidden
    assert json.loads(run("plan", str(PROD), "-o", "json").stdout)["fits"] is True


def test_render_prints_a_yaml_stream_or_one_json_v1_list() -> None:
    stream = run("render", str(PROD))
    listed = run("render", str(PROD), "-o", "json")
    assert stream.exit_code == listed.exit_code == 0, listed.output
    documents = list(yaml.safe_load_all(stream.stdout))
    doc = json.loads(listed.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert doc["items"] == documents and len(documents) > 2


def test_render_dash_o_with_a_directory_names_output_dir_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "somedir"
    result = run("render", str(PROD), "-o", f"{out}/")
    assert result.exit_code == ExitCode.USAGE
    assert "-o now chooses the format (yaml|json)" in result.stderr
    assert f"--output-dir {out}/" in result.stderr
    assert not out.exists()
    renamed = run("render", str(PROD), "--out", str(out))
    assert renamed.exit_code == ExitCode.USAGE and f"use --output-dir {out}" in renamed.stderr
    assert run("render", str(PROD), "--output-dir", str(out)).exit_code == 0
    assert sorted(p.suffix for p in out.iterdir()) == [".yaml"] * len(list(out.iterdir()))


def test_render_output_dir_with_json_is_refused(tmp_path: pathlib.Path) -> None:
    result = run("render", str(PROD), "--output-dir", str(tmp_path / "x"), "-o", "json")
    assert result.exit_code == ExitCode.USAGE and "--output-dir writes YAML files" in result.stderr


def test_audit_export_dash_o_with_a_file_names_output_file(tmp_path: pathlib.Path) -> None:
    result = run("audit", "export", "llm", "-o", str(tmp_path / "export.json"))
    assert result.exit_code == ExitCode.USAGE
    assert f"write the file with --output-file {tmp_path / 'export.json'}" in result.stderr


def test_audit_export_writes_yaml_that_audit_verify_reads_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    doc = {"release": "llm", "namespace": "ns", "head": "ab", "records": [{"timestamp": "2026-01-01T00:00:00Z"}]}
    monkeypatch.setattr(views, "audit_export", Recorder(doc))
    out = tmp_path / "export.yaml"
    result = run("audit", "export", "llm", "-n", "ns", "-o", "yaml", "--output-file", str(out))
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(out.read_text()) == doc
    assert views._read_export(str(out)) == doc  # the timestamp stays a string, as hashed


def test_diff_prints_each_objects_change_as_json_and_exits_11_on_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = [
        {"kind": "Service", "name": "x", "namespace": "n", "change": "unchanged", "diff": ""},
        {"kind": "Deployment", "name": "x", "namespace": "n", "change": "update", "diff": "--- a\n+++ b\n"},
    ]
    monkeypatch.setattr(views, "diff_objects", Recorder(objects))
    result = run("diff", str(DEV), "-o", "json")
    assert result.exit_code == 11
    assert json.loads(result.stdout) == {"changed": True, "objects": objects}
    monkeypatch.setattr(views, "diff_objects", Recorder(objects[:1]))
    same = run("diff", str(DEV), "-o", "yaml")
    assert same.exit_code == 0 and yaml.safe_load(same.stdout)["changed"] is False


@pytest.mark.parametrize(
    "args",
    [
        ("diff", "--no-such-option", str(DEV)),  # click's usage error
        ("diff", "/no/such/profile.yaml"),  # a missing file
        ("diff", str(DEV), "--set", "engine.maxNumSeqs"),  # a --set without =VALUE
    ],
)
def test_diff_usage_errors_never_exit_with_the_changes_code(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    # CI branches on diff's code: 11 must mean "changes" and nothing else, and a usage error stays 1.
    changed = [{"kind": "Deployment", "name": "x", "namespace": "n", "change": "update", "diff": "--- a\n+++ b\n"}]
    monkeypatch.setattr(views, "diff_objects", Recorder(changed))
    result = run(*args)
    assert result.exit_code == 1, result.output


# --- 2. the namespace rule ---------------------------------------------------------------------------


@pytest.fixture
def fake_status(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder({})
    monkeypatch.setattr(views, "status", recorder)
    return recorder


def test_namespace_comes_from_n_then_env_then_context_then_default(
    fake_status: Recorder, tmp_path: pathlib.Path
) -> None:
    config = kubeconfig(tmp_path / "config", "dev", {"dev": "team-a", "prod": "team-b", "bare": None})
    env = {"KUBECONFIG": str(config)}
    cases = [
        (["-n", "flag"], {"DEPLOYCTL_NAMESPACE": "env"}, "flag"),
        ([], {"DEPLOYCTL_STATUS_NAMESPACE": "cmd-env", "DEPLOYCTL_NAMESPACE": "env"}, "cmd-env"),
        ([], {"DEPLOYCTL_NAMESPACE": "env"}, "env"),
        ([], {}, "team-a"),
        (["--context", "prod"], {}, "team-b"),
        (["--context", "bare"], {}, "default"),
        (["--kubeconfig", str(tmp_path / "missing")], {}, "default"),
    ]
    for argv, extra, expected in cases:
        result = run("status", "llm", "-o", "json", *argv, env={**env, **extra})
        assert result.exit_code == 0, result.output
        assert fake_status.calls[-1][2] == expected, (argv, extra)


def test_kubeconfig_lists_several_files_and_the_first_current_context_wins(
    fake_status: Recorder, tmp_path: pathlib.Path
) -> None:
    first = kubeconfig(tmp_path / "a", "ops", {})
    second = kubeconfig(tmp_path / "b", "other", {"ops": "ops-ns", "other": "other-ns"})
    listed = os.pathsep.join([str(tmp_path / "absent"), str(first), str(second)])
    assert run("status", "llm", "-o", "json", env={"KUBECONFIG": listed}).exit_code == 0
    assert fake_status.calls[-1][2] == "ops-ns"


def test_the_profiles_namespace_wins_and_a_contradicting_n_is_an_error(
    fake_apply: Recorder, tmp_path: pathlib.Path
) -> None:
    config = kubeconfig(tmp_path / "config", "dev", {"dev": "team-a"})
    env = {"KUBECONFIG": str(config), "DEPLOYCTL_NAMESPACE": "env"}
    assert run("apply", str(DEV), env=env).exit_code == 0
    assert fake_apply.calls[-1][0].metadata.namespace == "inference-dev"  # neither env nor context
    assert run("apply", str(DEV), "-n", "inference-dev").exit_code == 0
    result = run("apply", str(DEV), "-n", "other")
    assert result.exit_code == ExitCode.USAGE
    assert "-n other contradicts the profile's metadata.namespace inference-dev (line 7)" in result.stderr
    assert len(fake_apply.calls) == 2


def test_a_profile_without_namespace_takes_n_or_the_context_and_records_it(
    fake_apply: Recorder, tmp_path: pathlib.Path
) -> None:
    path = without_namespace(tmp_path)
    config = kubeconfig(tmp_path / "config", "dev", {"dev": "team-a"})
    assert run("apply", str(path), env={"KUBECONFIG": str(config)}).exit_code == 0
    prof, text, _ = fake_apply.calls[-1]
    assert prof.metadata.namespace == "team-a"
    assert profile.loads(text).metadata.namespace == "team-a"  # the record says where it went
    assert "kubeconfig context 'dev'" in text
    assert run("apply", str(path), "-n", "ns-flag").exit_code == 0
    assert fake_apply.calls[-1][0].metadata.namespace == "ns-flag"
    assert run("apply", str(path)).exit_code == 0
    assert fake_apply.calls[-1][1] == path.read_text()  # nothing changed: the file's own text


# --- 3. DEPLOYCTL_<COMMAND>_<OPTION> -------------------------------------------------------------------


# Options whose callback checks or reshapes the value: a value it accepts, and what it makes of it.
_PARSED_BY_CALLBACK: dict[str, tuple[str, Any]] = {
    "dataset_name": ("random", "random"),
    "metadata": ("tp=4", {"tp": "4"}),
}


def _env_value(option: click.Option, tmp_path: pathlib.Path) -> tuple[str, Any]:
    """A value for ``option`` unlike its default, as a string for the environment, and as parsed."""
    kind = option.type
    if option.name in _PARSED_BY_CALLBACK:
        return _PARSED_BY_CALLBACK[option.name]
    if option.is_flag:
        return "1", True
    if isinstance(kind, click.Choice):
        choice = next(str(c) for c in kind.choices if c != option.default)
        return choice, choice
    if isinstance(kind, cli_options.Duration):
        return "2m", 120
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        value = (kind.min or 0) + 1  # in range for every bounded option deployctl has
        assert kind.max is None or value <= kind.max, option.name
        return str(value), value
    if kind is click.INT:
        return "7", 7
    if isinstance(kind, click.Path) and kind.exists:
        path = tmp_path / f"{option.name}.json"
        path.write_text("{}")
        return str(path), str(path)
    if option.multiple:
        return "engine.maxNumSeqs=8", ("engine.maxNumSeqs=8",)
    return "from-env", "from-env"


def _context_for(path: tuple[str, ...], argv: list[str]) -> click.Context:
    ctx = cli.main.make_context("deployctl", list(path))
    group: click.Command = cli.main
    for i, name in enumerate(path):
        assert isinstance(group, click.Group)
        cmd = group.commands[name]
        rest = list(path[i + 1 :]) if isinstance(cmd, click.Group) else argv
        ctx = cmd.make_context(name, rest, parent=ctx)
        group = cmd
    return ctx


def _required_argv(cmd: click.Command, skip: click.Parameter) -> list[str]:
    argv: list[str] = []
    for param in cmd.params:
        if param is skip or not param.required:
            continue
        if isinstance(param, click.Argument):
            argv.append(str(next(iter(param.type.choices))) if isinstance(param.type, click.Choice) else "x")
        else:
            argv += [param.opts[0], "http://x:1" if param.name == "url" else "x"]
    return argv


def test_every_option_of_every_command_reads_deployctl_command_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    checked = 0
    for path, cmd in cli_options.walk(cli.main):
        if isinstance(cmd, click.Group):
            continue
        for option in cmd.params:
            if not isinstance(option, click.Option) or option.hidden or option.name == "help":
                continue
            flag = next(o for o in option.opts if o.startswith("--"))  # every option has a long flag
            name = "_".join(["DEPLOYCTL", *path, flag[2:]]).upper().replace("-", "_")
            raw, expected = _env_value(option, tmp_path)
            with monkeypatch.context() as m:
                m.setenv(name, raw)
                ctx = _context_for(path, _required_argv(cmd, option))
            assert ctx.get_parameter_source(option.name or "") is ParameterSource.ENVIRONMENT, name
            assert ctx.params[option.name or ""] == expected, name
            checked += 1
    assert checked > 60  # every command's options, not a handful


def test_clicks_own_variable_names_still_work() -> None:
    plan = run("plan", str(PROD), env={"DEPLOYCTL_PLAN_OUTPUT_FORMAT": "json"})
    assert plan.exit_code == 0 and json.loads(plan.stdout)["fits"] is True
    new = run("plan", str(PROD), env={"DEPLOYCTL_PLAN_OUTPUT": "yaml"})
    assert yaml.safe_load(new.stdout)["fits"] is True


def test_audit_verify_reads_its_file_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    export = tmp_path / "export.json"
    export.write_text("{}")
    recorder = Recorder({"ok": True, "records": 0, "head": "", "problems": []})
    monkeypatch.setattr(views, "audit_verify", recorder)
    result = run("audit", "verify", env={"DEPLOYCTL_AUDIT_VERIFY_FILE": str(export)})
    assert result.exit_code == 0, result.output
    assert recorder.calls[-1][3] == str(export)


def _documented_variables() -> set[str]:
    return set(re.findall(r"\bDEPLOYCTL_[A-Z0-9_]*[A-Z0-9]\b", CLI_DOC.read_text()))


def test_every_variable_docs_cli_names_is_one_deployctl_reads() -> None:
    honoured = {cli_options.NAMESPACE_ENV, vllm_flags.FLAGS_DIR_ENV}  # read directly, not through an option
    for _path, cmd in cli_options.walk(cli.main):
        for option in cmd.params:
            if isinstance(option, click.Option) and option.envvar:
                honoured.update([option.envvar] if isinstance(option.envvar, str) else option.envvar)
    documented = _documented_variables()
    assert documented - honoured == set()
    assert {"DEPLOYCTL_NAMESPACE", "DEPLOYCTL_AUDIT_VERIFY_FILE", "DEPLOYCTL_RENDER_OUTPUT_DIR"} <= documented


def test_docs_cli_lists_every_commands_variables() -> None:
    """The table in docs/cli.md is generated from the commands (DEPLOYCTL_UPDATE_GOLDEN=1 rewrites it)."""
    rows = ["| command | its options' variables |", "|---|---|"]
    for path, cmd in cli_options.walk(cli.main):
        if isinstance(cmd, click.Group):
            continue
        names = [
            cli_options.env_name(path, o)
            for o in cmd.params
            if isinstance(o, click.Option) and not o.hidden and o.name != "help"
        ]
        if names:
            prefix = "_".join(["DEPLOYCTL", *path]).upper().replace("-", "_") + "_"
            cells = ", ".join(f"`{n.removeprefix(prefix)}`" for n in names)
            rows.append(f"| `{' '.join(path)}` (`{prefix}…`) | {cells} |")
    table = "\n".join(rows)
    text = CLI_DOC.read_text()
    start, end = "<!-- env-table: begin -->\n", "\n<!-- env-table: end -->"
    assert start in text and end in text
    current = text[text.index(start) + len(start) : text.index(end)]
    if UPDATE and current != table:
        head, tail = text[: text.index(start) + len(start)], text[text.index(end) :]
        CLI_DOC.write_text(head + table + tail)
        current = table
    assert current == table


# --- 4. durations ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written, seconds", [("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("45", 45.0), ("2.5", 2.5), ("1m30s", 90.0)]
)
def test_timeouts_take_go_style_durations_and_bare_seconds(fake_apply: Recorder, written: str, seconds: float) -> None:
    result = run("apply", str(DEV), "--timeout", written)
    assert result.exit_code == 0, result.output
    assert fake_apply.calls[-1][2].timeout == seconds


def test_lock_ttl_takes_a_duration_in_whole_seconds(fake_apply: Recorder) -> None:
    assert run("apply", str(DEV), "--lock-ttl", "5m").exit_code == 0
    assert fake_apply.calls[-1][2].lock_ttl == 300
    too_long = run("apply", str(DEV), "--lock-ttl", "2h")
    assert too_long.exit_code == ExitCode.USAGE and "at most 3600s" in too_long.stderr


@pytest.mark.parametrize("command", [["apply", str(DEV)], ["gate", str(DEV)], ["rollback", "llm"]])
def test_a_duration_in_words_names_the_option_and_the_forms(command: list[str]) -> None:
    result = run(*command, "--timeout", "10 minutes")
    assert result.exit_code == ExitCode.USAGE
    assert "'--timeout'" in result.stderr and "'10 minutes' is not a duration" in result.stderr
    assert "90s, 10m or 1h30m" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("command", [["apply", str(DEV)], ["uninstall", "llm"], ["bench", "--url", "http://x:1"]])
def test_a_duration_that_is_not_finite_is_refused_before_anything_runs(command: list[str], value: str) -> None:
    # NaN passes every comparison with a limit; left through, it reached uninstall's wait after the deletes.
    result = run(*command, "--timeout", value)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "'--timeout'" in result.stderr and "is not a finite duration" in result.stderr
    assert "Traceback" not in result.output


# --- 5. a profile on standard input --------------------------------------------------------------------


def test_validate_reads_dash_from_stdin_and_labels_it() -> None:
    result = run("validate", "-", input=DEV.read_bytes())
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<stdin>: valid; fits")


def test_a_bad_profile_on_stdin_is_named_stdin_with_its_line() -> None:
    text = DEV.read_text().replace("tensorParallelSize: 2", "tensorParalelSize: 2")
    result = run("validate", "-", input=text)
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "<stdin>:" in result.stderr and "engine.tensorParalelSize (line 16)" in result.stderr


def test_apply_from_stdin_records_the_text_it_read(fake_apply: Recorder) -> None:
    assert run("apply", "-", input=DEV.read_text()).exit_code == 0
    prof, text, _ = fake_apply.calls[-1]
    assert text == DEV.read_text() and prof.source == "<stdin>"


def test_render_and_plan_read_stdin_like_a_file() -> None:
    assert run("render", "-", input=PROD.read_text()).stdout == run("render", str(PROD)).stdout
    assert run("plan", "-", "-o", "json", input=PROD.read_text()).stdout == run("plan", str(PROD), "-o", "json").stdout


def test_dash_f_gives_the_profile_as_kubectl_users_type_it(fake_apply: Recorder) -> None:
    assert run("validate", "-f", str(DEV)).stdout == run("validate", str(DEV)).stdout
    assert run("apply", "--filename", "-", input=DEV.read_text()).exit_code == 0
    assert fake_apply.calls[-1][0].source == "<stdin>"
    twice = run("validate", str(DEV), "-f", str(PROD))
    assert twice.exit_code == ExitCode.USAGE and "the profile is given twice" in twice.stderr
    none = run("validate")
    assert none.exit_code == ExitCode.USAGE and "Missing argument 'PROFILE'" in none.stderr and "-f FILE" in none.stderr


# --- 6. --set -------------------------------------------------------------------------------------------


def _deployment(result: click.testing.Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    return next(o for o in json.loads(result.stdout)["items"] if o["kind"] == "Deployment")


def test_set_overrides_fields_before_validation_and_rendering() -> None:
    plain = _deployment(run("render", str(DEV), "-o", "json"))
    changed = _deployment(
        run(
            "render",
            str(DEV),
            "-o",
            "json",
            "--set",
            "rollout.replicas=2",
            "--set",
            "engine.maxNumSeqs=16",
            "--set",
            "metadata.labels.team=ml",
        )
    )
    assert plain["spec"]["replicas"] == 1 and changed["spec"]["replicas"] == 2
    args = changed["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "16" in args[args.index("--max-num-seqs") + 1 :][:1]
    assert changed["metadata"]["labels"]["team"] == "ml"


def test_set_reaches_lists_and_quoted_slo_strings() -> None:
    result = run(
        "validate",
        str(DEV),
        "--set",
        "placement.tolerations[1].key=dedicated",
        "--set",
        "gate.smoke.slo.p95_ttft_ms=<=2000",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    loaded = cli_options.load_profile(
        str(DEV), ("placement.tolerations[1].key=dedicated", "gate.smoke.slo.p95_ttft_ms=<=2000")
    ).profile
    assert [t.key for t in loaded.placement.tolerations] == ["nvidia.com/gpu", "dedicated"]
    assert loaded.gate.smoke.slo["p95_ttft_ms"] == "<=2000"


def test_set_values_are_yaml_so_a_wrong_type_is_a_field_error_naming_the_set() -> None:
    result = run("validate", str(DEV), "--set", "engine.maxNumSeqs=many")
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "engine.maxNumSeqs (from --set engine.maxNumSeqs=many)" in result.stderr


def test_a_planner_refusal_of_a_set_value_names_the_set_not_the_files_line() -> None:
    # The file's line 16 says tensorParallelSize: 2; pointing there would send the reader to a value that is fine.
    result = run("validate", str(DEV), "--set", "engine.tensorParallelSize=3")
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "engine.tensorParallelSize (from --set engine.tensorParallelSize=3): tensorParallelSize 3" in result.stderr
    assert "(line" not in result.stderr
    from_file = run("validate", "-", input=DEV.read_text().replace("tensorParallelSize: 2", "tensorParallelSize: 3"))
    assert "engine.tensorParallelSize (line 16): tensorParallelSize 3" in from_file.stderr


def test_an_unknown_set_path_names_the_key_and_the_set() -> None:
    result = run("validate", str(DEV), "--set", "engine.maxNumSeq=32")
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "engine.maxNumSeq (from --set engine.maxNumSeq=32): unknown key; did you mean 'maxNumSeqs'?" in (
        result.stderr
    )


@pytest.mark.parametrize(
    "setting, words",
    [
        ("engine", "expected KEY=VALUE"),
        ("engine.maxNumSeqs.x=1", "engine.maxNumSeqs holds a int, not a mapping"),
        ("placement.tolerations[5].key=x", "placement.tolerations has 1 item(s); set [1] to add one"),
        ("placement.tolerations[0].key=x", "holds its default, [{key: nvidia.com/gpu, operator: Exists"),
        ("engine..x=1", "is not a profile path"),
    ],
)
def test_a_malformed_set_is_a_usage_error_naming_it(setting: str, words: str) -> None:
    result = run("validate", str(DEV), "--set", setting)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"--set {setting}" in result.stderr and words in result.stderr


def _tolerations(*sets: str) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    tolerations: list[dict[str, Any]] = _deployment(run("render", str(DEV), "-o", "json", *args))["spec"]["template"][
        "spec"
    ]["tolerations"]
    return tolerations


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_an_index_past_the_default_toleration_adds_one_and_keeps_the_gpu_toleration() -> None:
    assert _tolerations() == [GPU_TOLERATION]
    added = _tolerations("placement.tolerations[1].key=dedicated", "placement.tolerations[1].effect=NoSchedule")
    assert added == [GPU_TOLERATION, {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    "setting",
    [
        "placement.tolerations[0].key=x",  # the docs' old example: it silently dropped the GPU toleration
        "placement.tolerations[0].effect=NoExecute",
    ],
)
def test_an_index_into_a_default_toleration_is_refused_showing_the_default(setting: str) -> None:
    result = run("render", str(DEV), "--set", setting)
    assert result.exit_code == ExitCode.USAGE and "apiVersion" not in result.stdout  # nothing rendered
    message = " ".join(result.stderr.split())
    assert f"--set {setting}: the profile does not write placement.tolerations" in message
    assert "[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]" in message
    assert "use [1]" in message and "--set 'placement.tolerations=[…]'" in message
    # Seeding the default by an append first does not make its item editable by index.
    again = run("validate", str(DEV), "--set", "placement.tolerations[1].key=a", "--set", setting)
    assert again.exit_code == ExitCode.USAGE and "holds its default" in again.stderr


def test_a_list_given_whole_replaces_the_default_on_purpose() -> None:
    whole = "placement.tolerations=[{key: dedicated, operator: Exists}]"
    assert _tolerations(whole) == [{"key": "dedicated", "operator": "Exists"}]
    assert _tolerations(whole, "placement.tolerations[0].effect=NoSchedule")[0]["effect"] == "NoSchedule"


def test_an_index_into_a_list_the_profile_writes_edits_the_profiles_item() -> None:
    text = DEV.read_text() + "placement:\n  tolerations:\n  - {key: pool, operator: Equal, value: a}\n"
    result = run("render", "-", "-o", "json", "--set", "placement.tolerations[0].value=b", input=text)
    tolerations = _deployment(result)["spec"]["template"]["spec"]["tolerations"]
    assert tolerations == [{"key": "pool", "operator": "Equal", "value": "b"}]


def test_a_toleration_with_only_an_effect_is_refused_naming_the_set() -> None:
    result = run("validate", str(DEV), "--set", "placement.tolerations[1].effect=NoExecute")
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert (
        "placement.tolerations.1.key (from --set placement.tolerations[1].effect=NoExecute): a toleration without "
        "a key tolerates every NoExecute taint"
    ) in " ".join(result.stderr.split())
    assert "operator: Exists" in result.stderr
    on_purpose = run("validate", str(DEV), "--set", "placement.tolerations[1]={effect: NoExecute, operator: Exists}")
    assert on_purpose.exit_code == 0, on_purpose.output


def test_apply_records_the_effective_profile_with_its_overrides(fake_apply: Recorder) -> None:
    result = run("apply", str(DEV), "--set", "engine.maxNumSeqs=16", "--set", "rollout.replicas=2")
    assert result.exit_code == 0, result.output
    prof, text, _ = fake_apply.calls[-1]
    assert (prof.engine.maxNumSeqs, prof.rollout.replicas) == (16, 2)
    recorded = profile.loads(text)
    assert recorded.spec_hash() == prof.spec_hash()  # the record holds what was deployed
    assert "--set engine.maxNumSeqs=16" in text and "--set rollout.replicas=2" in text


def test_a_value_with_a_newline_keeps_the_recorded_profile_parseable(fake_apply: Recorder) -> None:
    result = run("apply", str(DEV), "--set", "placement.podAnnotations.note='first line\nsecond line'")
    assert result.exit_code == 0, result.output
    prof, text, _ = fake_apply.calls[-1]
    assert profile.loads(text).spec_hash() == prof.spec_hash()


def test_gate_records_the_effective_profile_too(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(deployed())
    monkeypatch.setattr(gitops, "gate", recorder)
    assert run("gate", str(DEV), "--set", "rollout.replicas=3").exit_code == 0
    assert profile.loads(recorder.calls[-1][1]).rollout.replicas == 3


# --- 7. help and completion ----------------------------------------------------------------------------


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, cmd in group.commands.items():
        found.append((prefix + name, cmd))
        if isinstance(cmd, click.Group):
            found += _commands(cmd, f"{prefix}{name} ")
    return found


def test_no_output_help_offers_a_format_the_option_refuses() -> None:
    checked = 0
    for name, cmd in _commands(cli.main):
        for param in cmd.params:
            if param.name != "output_format" or not isinstance(param, click.Option):
                continue
            choices = set(param.type.choices)  # type: ignore[attr-defined]
            offered = set(re.findall(r"\b(text|json|yaml|table)\b", param.help or ""))
            assert offered <= choices, f"deployctl {name} -o: help offers {offered - choices}, -o takes {choices}"
            checked += 1
    assert checked > 10
    assert run("bench", "--url", "http://x", "-o", "yaml").exit_code == ExitCode.USAGE
    assert "yaml" not in run("bench", "--help").stdout.split("--output", 1)[1].split("\n  -")[0]


def test_top_level_help_shows_every_command_description_whole() -> None:
    text = run("--help").stdout.split("\n", 1)[1]  # after the usage line, which ends in [ARGS]...
    assert "..." not in text
    flat = " ".join(text.split())
    for name, cmd in cli.main.commands.items():
        first = " ".join((cmd.help or "").split("\n\n")[0].split())
        first = first if first.endswith(".") else first.split(". ")[0]
        assert f"{name} {first.split('.')[0]}" in flat, name


@pytest.mark.parametrize("command", ["validate", "plan", "render", "apply", "gate", "diff"])
def test_profile_arguments_complete_file_paths(command: str) -> None:
    env = {"_DEPLOYCTL_COMPLETE": "bash_complete", "COMP_WORDS": f"deployctl {command} prof", "COMP_CWORD": "2"}
    assert run(env=env).stdout.split() == ["file,prof"]
    zsh = run(env={**env, "_DEPLOYCTL_COMPLETE": "zsh_complete"}).stdout.split()
    assert zsh[:2] == ["file", "prof"]


def test_dash_f_completes_file_paths() -> None:
    env = {"_DEPLOYCTL_COMPLETE": "bash_complete", "COMP_WORDS": "deployctl apply -f prof", "COMP_CWORD": "3"}
    assert run(env=env).stdout.split() == ["file,prof"]


def test_bash_source_prints_the_completion_script() -> None:
    result = run(env={"_DEPLOYCTL_COMPLETE": "bash_source"})
    assert "complete -o nosort -F _deployctl_completion deployctl" in result.stdout


# --- 8. colour -----------------------------------------------------------------------------------------


def test_force_color_colours_output_without_a_terminal_and_no_color_wins() -> None:
    plain = run("validate", str(DEV))
    forced = run("validate", str(DEV), env={"FORCE_COLOR": "1"})
    assert "\033[" not in plain.stdout
    assert "\033[32mfits\033[0m" in forced.stdout
    assert "\033[" not in run("validate", str(DEV), env={"FORCE_COLOR": ""}).stdout
    assert "\033[" not in run("validate", str(DEV), env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout


def test_no_color_turns_colour_off_on_a_terminal_only_when_non_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            monkeypatch.setenv("TERM", "xterm")
            assert output.color_enabled(tty)
            monkeypatch.setenv("NO_COLOR", "")
            assert output.color_enabled(tty)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not output.color_enabled(tty)
    finally:
        os.close(leader)
        os.close(follower)
