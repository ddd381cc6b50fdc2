"""engine.loadFormat and engine.loadStreamer: checked against the load formats of the profile's vLLM
version before anything starts, and rendered as vLLM's own flags (orchestrator.engines.vllm_loaders)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator.cli import app as cli
from orchestrator.engines import vllm_flags, vllm_loaders
from orchestrator.errors import ExitCode
from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((ROOT / "profiles" / "dev-tp2.yaml").read_text())


def _doc(**engine: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(BASE))
    doc["engine"].update(engine)
    return doc


def _validate(tmp_path: pathlib.Path, doc: dict[str, Any]) -> click.testing.Result:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return click.testing.CliRunner().invoke(cli.main, ["validate", str(path)], prog_name="deployctl")


def _args(doc: dict[str, Any]) -> list[str]:
    prof = profiles.Profile.model_validate(doc)
    deployment = next(o for o in render.render(prof, planner.plan(prof)) if o["kind"] == "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_every_vllm_version_with_a_flag_table_has_a_load_format_table() -> None:
    assert sorted(vllm_flags.shipped_versions()) == sorted(
        v for v in vllm_flags.shipped_versions() if vllm_loaders.formats(v)
    )
    for version in vllm_flags.shipped_versions():
        assert {"auto", "safetensors", "runai_streamer", "fastsafetensors"} <= set(vllm_loaders.formats(version) or ())


@pytest.mark.parametrize(
    ("load_format", "version", "said"),
    [
        (
            "instanttensor",
            "0.15.1",
            "vLLM 0.15.1 has no load format 'instanttensor' (vLLM 0.19.0, 0.32.0, 0.33.0 have it)",
        ),
        ("gguf", "0.32.0", "vLLM 0.32.0 has no load format 'gguf' (vLLM 0.15.1, 0.19.0 have it)"),
        ("ipc_cache", "0.19.0", "(vLLM 0.32.0, 0.33.0 have it)"),
        ("safetensor", "0.33.0", "(no vLLM version has it); vLLM 0.33.0 has: auto, dummy, fastsafetensors"),
    ],
)
def test_a_load_format_the_version_lacks_names_the_versions_that_have_it(
    load_format: str, version: str, said: str
) -> None:
    problem = vllm_loaders.problem(load_format, version)
    assert problem is not None and said in problem


def test_an_unknown_load_format_is_exit_2_naming_the_field_and_its_line(tmp_path: pathlib.Path) -> None:
    result = _validate(tmp_path, _doc(vllmVersion="0.32.0", loadFormat="gguf"))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "engine.loadFormat" in result.output and "line " in result.output
    assert "vLLM 0.15.1, 0.19.0 have it" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"loadStreamer": {"concurrency": 8}}, "loadStreamer needs loadFormat runai_streamer"),
        ({"loadFormat": "safetensors", "loadStreamer": {"concurrency": 8}}, "'safetensors' does not use it"),
        ({"loadFormat": "safetensors", "extraArgs": ["--load-format=pt"]}, "--load-format is set by engine.loadFormat"),
        ({"loadFormat": "runai_streamer", "loadStreamer": {"concurrency": 0}}, "greater than or equal to 1"),
        ({"loadFormat": "runai_streamer", "loadStreamer": {"memoryLimitBytes": -2}}, "greater than or equal to -1"),
    ],
)
def test_streamer_settings_go_with_the_streamer_only(tmp_path: pathlib.Path, engine: dict[str, Any], said: str) -> None:
    result = _validate(tmp_path, _doc(**engine))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert said in result.output, result.output


def test_another_engine_refuses_load_format(tmp_path: pathlib.Path) -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "tgi-tp4.yaml").read_text())
    doc["engine"]["loadFormat"] = "safetensors"
    result = _validate(tmp_path, doc)
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "loadFormat is vLLM's --load-format" in result.output


def test_the_streamer_renders_as_vllms_own_flags() -> None:
    args = _args(_doc(loadFormat="runai_streamer", loadStreamer={"concurrency": 32, "memoryLimitBytes": 5368709120}))
    at = args.index("--load-format")
    assert args[at : at + 4] == [
        "--load-format",
        "runai_streamer",
        "--model-loader-extra-config",
        '{"concurrency":32,"memory_limit":5368709120}',
    ]
    # What vLLM's flag table makes of them: both known flags of this version.
    assert vllm_flags.check(args[at : at + 4], BASE["engine"].get("vllmVersion", "0.33.0")) == []


def test_unset_leaves_the_args_and_the_profile_hash_as_before() -> None:
    plain = profiles.Profile.model_validate(_doc())
    assert "--load-format" not in _args(_doc())
    dumped = plain.model_dump(mode="json")["engine"]
    assert "loadFormat" not in dumped and "loadStreamer" not in dumped  # older profiles keep their hash
