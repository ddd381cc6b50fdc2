"""The vLLM flag tables and the check of a profile's extraArgs, including the corpus of extraArgs cases."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pydantic
import pytest
import yaml

from orchestrator.engines import vllm_flags
from orchestrator.profile import engine as profile_engine

VERSION = "0.33.0"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "orchestrator" / "data" / "vllm_flags"
CORPUS = yaml.safe_load((ROOT / "tests" / "data" / "extra_args_corpus.yaml").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "0" * 64


def kinds(args: list[str]) -> list[tuple[str, str]]:
    return [(p.arg, p.kind) for p in vllm_flags.check(args, VERSION)]


def test_the_default_profile_version_has_a_flag_list() -> None:
    assert VERSION in vllm_flags.known_versions()


def test_generated_list_has_engine_frontend_and_negated_flags() -> None:
    fs = vllm_flags.flag_set(VERSION)
    # Engine args (arg_utils.py), frontend args (cli_args.py), hand-added serve flags and short aliases.
    for flag in [
        "--tensor-parallel-size",
        "-tp",
        "--kv-cache-dtype",
        "--enforce-eager",
        "--api-key",
        "--enable-auto-tool-choice",
        "--headless",
        "--api-server-count",
        "--uvicorn-log-level",
        "--compilation-config",
        "--speculative-config",
        "--enable-log-requests",
    ]:
        assert flag in fs.flags, flag
    # Booleans get --no-…; vLLM's EnableDisableAction also pairs --enable-x with --disable-x.
    assert {"--no-enforce-eager", "--no-enable-prefix-caching", "--disable-prefix-caching"} <= fs.flags
    assert "--enable-log-stats" not in fs.flags  # --disable-log-stats is store_true: no inverse
    assert "--hf-token" in fs.flags and "--hf-token" not in fs.switches  # bool | str takes a value
    assert "--enforce-eager" in fs.switches and "--max-model-len" not in fs.switches


def test_flag_list_records_where_it_came_from() -> None:
    doc = json.loads((DATA / f"{VERSION}.json").read_text())
    assert doc["version"] == VERSION and "arg_utils.py" in doc["source"]
    assert doc["flags"] == sorted(doc["flags"])


def test_valid_args_pass_including_values_json_subkeys_underscores_and_optimization_level() -> None:
    args = [
        "--enforce-eager",
        "--quantization",
        "fp8",
        "--compilation-config.mode",
        "3",
        "-O3",
        "--trust_remote_code",
        "--max-loras=4",
        "--override-generation-config",
        '{"temperature": 0.2}',
        "--seed",
        "-1",
        "--no-enable-log-requests",
    ]
    assert vllm_flags.check(args, VERSION) == []


def test_misspelt_flag_gets_a_did_you_mean() -> None:
    [problem] = vllm_flags.check(["--max-model-length", "8192"], "0.33.0")
    assert problem.kind == "unknown" and problem.index == 0
    assert problem.suggestion == "--max-model-len"
    assert "did you mean --max-model-len" in problem.message


def test_flag_without_a_close_match_has_no_suggestion() -> None:
    [problem] = vllm_flags.check(["--zzzz-qqqq"], VERSION)
    assert problem.kind == "unknown" and problem.suggestion is None


def test_removed_flag_is_unknown() -> None:
    # --swap-space belonged to the V0 engine and is gone from 0.33.
    assert kinds(["--swap-space", "4"]) == [("--swap-space", "unknown")]


def test_abbreviation_is_reported_with_the_full_flag() -> None:
    [problem] = vllm_flags.check(["--max-cudagraph-capture", "256"], VERSION)
    assert problem.kind == "abbreviation" and problem.suggestion == "--max-cudagraph-capture-size"


def test_value_given_to_a_switch_is_reported() -> None:
    [problem] = vllm_flags.check(["--enforce-eager=true"], VERSION)
    assert problem.kind == "value-on-switch" and "--no-enforce-eager" in problem.message


@pytest.mark.parametrize(
    "arg",
    [
        "--tensor-parallel-size",
        "-tp",
        "--max-model-len=4096",
        "--gpu_memory_utilization",
        "--port",
        "--no-enable-prefix-caching",
        "--kv-cache-dtype",
        "--served-model-name",
        "--max-num-seqs",
    ],
)
def test_flags_deployctl_renders_are_reserved(arg: str) -> None:
    [problem] = vllm_flags.check([arg], VERSION)
    assert problem.kind == "reserved"
    assert "engine." in problem.message or "model." in problem.message


def test_reserved_flags_are_real_vllm_flags_and_name_a_profile_field() -> None:
    fs = vllm_flags.flag_set(VERSION)
    for flag, field in vllm_flags.reserved_flags().items():
        assert flag in fs.flags, flag
        assert field.startswith(("engine.", "model.", "placement.")), field


def test_unknown_version_says_how_to_generate_it() -> None:
    with pytest.raises(KeyError, match=r"deployctl engine-flags import --vllm-version 0\.1\.0"):
        vllm_flags.check([], "0.1.0")


def test_has_flag_honours_underscores_and_a_later_negation() -> None:
    assert vllm_flags.has_flag(["--enforce_eager"], "--enforce-eager")
    assert not vllm_flags.has_flag(["--enforce-eager", "--no-enforce-eager"], "--enforce-eager")
    assert not vllm_flags.has_flag([], "--enforce-eager")


# --- the tables --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", vllm_flags.known_versions())
def test_every_table_has_one_entry_per_option_that_accounts_for_every_flag(version: str) -> None:
    doc = json.loads((DATA / f"{version}.json").read_text())
    assert doc["version"] == version and doc["format"] == 2
    strings = [s for o in doc["options"] for s in o["names"] + o["negations"]]
    assert sorted(strings) == doc["flags"], "an option string is missing from, or twice in, the options"
    assert sorted(s for o in doc["options"] if o["switch"] for s in o["names"] + o["negations"]) == doc["switches"]
    for opt in doc["options"]:
        assert opt["type"] in {*doc["kinds"], None}, opt
        assert opt["switch"] == (opt["nargs"] == 0), opt
        assert not opt["negations"] or opt["action"] == "boolean", opt


def test_the_installed_versions_table_comes_from_vllms_own_parser() -> None:
    doc = json.loads((DATA / "0.32.0.json").read_text())
    assert doc["generated_by"] == "scripts/gen_vllm_flags.py --from-parser"
    assert all(o["type"] is not None for o in doc["options"]), "the parser knows every type"
    dtype = next(o for o in doc["options"] if o["names"] == ["--dtype"])
    assert dtype["choices"] == ["auto", "bfloat16", "float", "float16", "float32", "half"]
    assert dtype["default"] == "auto" and doc["defaults"]["--dtype"] == "auto"


@pytest.mark.parametrize("version", vllm_flags.known_versions())
def test_no_table_has_a_no_form_of_an_enable_disable_inverse(version: str) -> None:
    # EnableDisableAction (vLLM 0.33) adds --disable-x to --enable-x, but no --no-disable-x; earlier versions
    # have no EnableDisableAction at all, so --enable-x only pairs with --no-enable-x.
    fs = vllm_flags.flag_set(version)
    for opt in set(fs.options.values()):
        inverses = {_inverse(n) for n in opt.names} - {None}
        for negation in opt.negations:
            assert negation in inverses or negation.removeprefix("--no-") in {n[2:] for n in opt.names}, opt
            assert negation.removeprefix("--no-") not in {i[2:] for i in inverses if i}, opt
    assert ("--disable-prefix-caching" in fs.flags) == (version == "0.33.0")
    assert "--no-enable-prefix-caching" in fs.flags


def _inverse(flag: str) -> str | None:
    for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
        if flag.startswith(prefix):
            return inverse + flag.removeprefix(prefix)
    return None


def test_the_enable_disable_pairs_of_0_33_have_no_invented_no_forms() -> None:
    fs = vllm_flags.flag_set("0.33.0")
    assert {"--enable-log-requests", "--no-enable-log-requests", "--disable-log-requests"} <= fs.flags
    assert "--no-disable-log-requests" not in fs.flags
    assert {"--disable-sliding-window", "--no-disable-sliding-window", "--enable-sliding-window"} <= fs.flags
    assert "--no-enable-sliding-window" not in fs.flags
    # 0.15.1 declared --disable-log-requests itself (deprecated), so there it has its --no- form.
    assert "--no-disable-log-requests" in vllm_flags.flag_set("0.15.1").flags


def test_source_read_tables_carry_types_and_choices() -> None:
    fs = vllm_flags.flag_set("0.19.0")
    assert fs.options["--dtype"].choices is not None and "bfloat16" in fs.options["--dtype"].choices
    assert fs.options["--max-num-seqs"].type == "int" and fs.options["--cpu-offload-gb"].type == "float"
    assert fs.options["--compilation-config"].type == "config" and fs.options["--compilation-config"].keys


# --- the corpus --------------------------------------------------------------------------------------------


def validate(args: list[str], version: str) -> tuple[str, str]:
    """`deployctl validate`'s verdict on a profile with these extraArgs, and its message."""
    try:
        profile_engine.EngineSpec(image=IMAGE, maxModelLen=4096, vllmVersion=version, extraArgs=args)
    except pydantic.ValidationError as e:
        return "refuse", str(e)
    return "accept", ""


def test_the_corpus_is_big_enough_and_explains_every_deliberate_difference() -> None:
    assert len(CASES) >= 60
    assert {c["expect"] for c in CASES} == {"accept", "refuse"}
    for case in CASES:
        assert set(case) <= {"args", "expect", "vllm", "note", "says"}, case
        if "vllm" in case:
            assert case["vllm"] != case["expect"] and case.get("note"), f"say why deployctl differs: {case}"
    assert CORPUS["version"] in vllm_flags.known_versions()


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c["args"])[:40] or "(none)")
def test_validate_gives_each_corpus_case_its_verdict(case: dict[str, Any]) -> None:
    verdict, message = validate(case["args"], CORPUS["version"])
    assert verdict == case["expect"], message
    for words in case.get("says", []):
        assert words in message, f"{message!r} should say {words!r}"


@pytest.mark.parametrize("case", [c for c in CASES if c["expect"] == "refuse"], ids=lambda c: " ".join(c["args"])[:40])
def test_every_refusal_names_the_argument_and_a_fix(case: dict[str, Any]) -> None:
    problems = vllm_flags.check(case["args"], CORPUS["version"])
    if not problems:  # --api-key: refused by the profile's own rule
        _, message = validate(case["args"], CORPUS["version"])
        assert "extraArgs" in message and "--api-key" in message
        return
    fixes = ("write", "set it there", "remove", "did you mean", "choices", "join them", "needs", "drop", "put the")
    for p in problems:
        named = p.arg.split("=", 1)[0].split(".", 1)[0] if p.arg.startswith("--") else p.arg
        assert named in p.message or vllm_flags.normalize(p.arg) in p.message, p
        assert any(f in p.message for f in fixes), p


# --- what the issue listed -----------------------------------------------------------------------------------


def test_a_value_outside_the_choices_lists_them() -> None:
    [problem] = vllm_flags.check(["--dtype", "float7"], VERSION)
    assert problem.kind == "bad-choice"
    assert "auto, bfloat16, float, float16, float32, half" in problem.message


def test_a_value_of_the_wrong_type_says_which_type() -> None:
    [problem] = vllm_flags.check(["--block-size", "abc"], VERSION)
    assert problem.kind == "bad-value" and "integer" in problem.message and "'abc'" in problem.message


def test_a_flag_without_its_value_is_refused() -> None:
    assert kinds(["--block-size"]) == [("--block-size", "missing-value")]
    assert kinds(["--block-size", "--enforce-eager"]) == [("--block-size", "missing-value")]


def test_a_value_after_a_switch_is_refused_as_vllm_does() -> None:
    [problem] = vllm_flags.check(["--enforce-eager", "yes"], VERSION)
    assert problem.kind == "stray-value" and problem.index == 1
    assert "--no-enforce-eager" in problem.message


def test_auto_tool_choice_needs_a_tool_call_parser() -> None:
    assert kinds(["--enable-auto-tool-choice"]) == [("--enable-auto-tool-choice", "needs-flag")]
    assert kinds(["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]) == []


def test_a_no_form_vllm_never_added_points_at_the_one_it_did() -> None:
    [problem] = vllm_flags.check(["--no-disable-log-requests"], VERSION)
    assert problem.kind == "unknown" and problem.suggestion == "--enable-log-requests"
    assert kinds(["--disable-log-requests", "--no-enable-log-requests"]) == []


def test_config_json_keys_are_checked_with_a_did_you_mean() -> None:
    [problem] = vllm_flags.check(["--compilation-config.cudagraph_mod", "FULL"], VERSION)
    assert problem.kind == "bad-value" and problem.suggestion == "cudagraph_mode"
    assert kinds(["--compilation-config", '{"cudagraph_capture_sizes": [1, 2], "mode": 3}']) == []


def test_a_table_without_a_type_checks_no_value() -> None:
    # A source-read table records null where the source does not pin the type down.
    fs = vllm_flags.flag_set("0.33.0")
    untyped = next(name for name, opt in fs.options.items() if opt.type is None and not opt.switch)
    assert kinds([untyped, "anything"]) == []
