"""The vLLM flag lists and the check of a profile's extraArgs."""

from __future__ import annotations

import json
import pathlib

import pytest

from orchestrator import vllm_flags

VERSION = "0.33.0"
DATA = pathlib.Path(__file__).resolve().parent.parent / "orchestrator" / "data" / "vllm_flags"


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
        assert field.startswith(("engine.", "model.")), field


def test_unknown_version_says_how_to_generate_it() -> None:
    with pytest.raises(KeyError, match=r"gen_vllm_flags\.py 0\.1\.0"):
        vllm_flags.check([], "0.1.0")


def test_has_flag_honours_underscores_and_a_later_negation() -> None:
    assert vllm_flags.has_flag(["--enforce_eager"], "--enforce-eager")
    assert not vllm_flags.has_flag(["--enforce-eager", "--no-enforce-eager"], "--enforce-eager")
    assert not vllm_flags.has_flag([], "--enforce-eager")
