"""engine.skipMemoryProfiling: vLLM starts with --kv-cache-memory-bytes from a calibration instead of
profiling its memory; without a calibration it is refused with exit 2 (render) before anything runs."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import click.testing
import yaml

from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _doc(name: str = "dev-tp2.yaml", **engine: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "profiles" / name).read_text())
    doc["engine"].update(engine)
    return doc


def _run(tmp_path: pathlib.Path, command: str, doc: dict[str, Any]) -> click.testing.Result:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return click.testing.CliRunner().invoke(cli.main, [command, str(path)], prog_name="deployctl")


def test_a_calibrated_plan_renders_the_kv_cache_vllm_allocated_last_time() -> None:
    prof = profiles.Profile.model_validate(_doc(skipMemoryProfiling=True))
    planned = planner.plan(prof)
    observed = planned.kv_cache_tokens * 9 // 10  # the running vLLM had 10 % less than planned
    calibrated = planner.check(prof, calibration=planner.calibrate(planned.to_json(), observed, "llm revision 2"))
    deployment = next(o for o in render.render(prof, calibrated) if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    rendered = int(args[args.index("--kv-cache-memory-bytes") + 1])
    block = int(planned.inputs["block_size"]) * planned.kv_bytes_per_token_per_gpu  # tokens are whole blocks
    assert abs(rendered - observed * planned.kv_bytes_per_token_per_gpu) < block
    assert "--gpu-memory-utilization" in args  # still said: vLLM ignores it beside the bytes, others read it


def test_render_without_a_calibration_is_exit_2_naming_plan_calibrate_from(tmp_path: pathlib.Path) -> None:
    result = _run(tmp_path, "render", _doc(skipMemoryProfiling=True))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "engine.skipMemoryProfiling needs a calibration" in result.output
    assert "deployctl plan PROFILE --calibrate-from RELEASE" in result.output and "Traceback" not in result.output


def _args(doc: dict[str, Any]) -> list[str]:
    prof = profiles.Profile.model_validate(doc)
    deployment = next(o for o in render.render(prof, planner.plan(prof)) if o["kind"] == "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_false_or_unset_renders_as_before_and_keeps_the_profile_hash() -> None:
    plain, off = _doc(), _doc(skipMemoryProfiling=False)
    assert _args(off) == _args(plain) and "--kv-cache-memory-bytes" not in _args(plain)
    dumped = profiles.Profile.model_validate(plain).model_dump(mode="json")["engine"]
    assert "skipMemoryProfiling" not in dumped


def test_another_engine_or_the_flag_in_extra_args_is_refused(tmp_path: pathlib.Path) -> None:
    tgi = _run(tmp_path, "validate", _doc("tgi-tp4.yaml", skipMemoryProfiling=True))
    assert tgi.exit_code == ExitCode.INVALID_PROFILE and "TGI has no such flag" in tgi.output, tgi.output
    twice = _run(tmp_path, "validate", _doc(skipMemoryProfiling=True, extraArgs=["--kv-cache-memory-bytes=1000"]))
    assert twice.exit_code == ExitCode.INVALID_PROFILE, twice.output
    assert "--kv-cache-memory-bytes is set by engine.skipMemoryProfiling" in twice.output
    assert json.dumps(twice.output)  # one paragraph of text, no traceback
    assert "Traceback" not in tgi.output + twice.output


def test_the_calibration_holds_over_many_revisions_that_skipped_profiling() -> None:
    # Revision 1 profiled and had 10 % less KV cache than planned. Revision 2 starts with that cache
    # (skipMemoryProfiling) and logs exactly it; revision 3, calibrated from revision 2, must keep it.
    prof = profiles.Profile.model_validate(_doc(skipMemoryProfiling=True))
    first = planner.plan(prof)
    observed = first.kv_cache_tokens * 9 // 10
    second = planner.check(prof, calibration=planner.calibrate(first.to_json(), observed, "llm revision 1"))
    third = planner.check(prof, calibration=planner.calibrate(second.to_json(), observed, "llm revision 2"))
    assert abs(third.kv_cache_gib_per_gpu - second.kv_cache_gib_per_gpu) < 0.005  # the record keeps 3 decimals
    assert third.kv_cache_gib_per_gpu < first.kv_cache_gib_per_gpu * 0.95
