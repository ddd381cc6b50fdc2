"""Every engine behind one interface: the profile's fields become each engine's own flags, a field an
engine cannot honour is refused by name, and each engine's health path, memory rule, start-up lines
and crash lines are the ones its source and public logs show (tests/data/engine_logs names each)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator import engines
from orchestrator.apply import rollout, verify
from orchestrator.cli import app as cli
from orchestrator.engines import base
from orchestrator.errors import ExitCode
from orchestrator.gate import workload
from orchestrator.plan import planner
from orchestrator.profile import engine as profile_engine
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "engine_logs"
PROFILES = {kind: ROOT / "profiles" / f"{kind}-tp4.yaml" for kind in ("tgi", "trtllm", "sglang")}


def run(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl")


def variant(tmp_path: pathlib.Path, kind: str, **changes: Any) -> pathlib.Path:
    """The engine's example profile with dotted fields replaced; written beside the test."""
    data = yaml.safe_load(PROFILES[kind].read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def container(prof: profile.Profile) -> dict[str, Any]:
    objects = render.render(prof, planner.plan(prof))
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    result: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return result


def flag_values(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs (a flag followed by another flag is a switch: None)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


# --- the same fields, each engine's flags ---------------------------------------------------------------


def test_the_profile_kinds_are_the_engines_deployctl_has() -> None:
    assert set(profile_engine.EngineSpec.model_fields["kind"].annotation.__args__) == set(engines.KINDS)  # type: ignore[union-attr]
    assert engines.DEFAULT_KIND == "vllm" and profile.load(ROOT / "profiles" / "prod-tp4.yaml").engine.kind == "vllm"


def test_every_engine_maps_only_kv_cache_dtypes_the_profile_has() -> None:
    assert profile_engine.EngineSpec.model_fields["kvCacheDtype"].annotation.__args__ == engines.KV_CACHE_DTYPES  # type: ignore[union-attr]
    for engine in engines.ENGINES.values():
        assert set(engine.kv_cache_dtypes) <= set(engines.KV_CACHE_DTYPES), engine.kind


def test_tgi_gets_its_launcher_flags_from_the_profile_fields() -> None:
    c = container(profile.load(PROFILES["tgi"]))
    assert c["command"] == ["text-generation-launcher"]
    flags = flag_values(c["args"])
    assert flags["--model-id"] == "/models/llama3-70b-instruct"
    assert (flags["--num-shard"], flags["--max-total-tokens"], flags["--max-input-tokens"]) == ("4", "8192", "8191")
    assert flags["--max-concurrent-requests"] == "64"
    assert flags["--kv-cache-dtype"] == "fp8_e4m3fn"  # TGI's name for e4m3
    assert flags["--cuda-memory-fraction"] == "0.95"
    assert (flags["--hostname"], flags["--usage-stats"]) == ("0.0.0.0", "off")  # offline: no usage report
    assert "--served-model-name" not in flags and "--pipeline-parallel-size" not in flags


def test_trtllm_gets_its_click_flags_and_chunked_prefill_when_the_context_is_longer_than_a_batch() -> None:
    prof = profile.load(PROFILES["trtllm"])
    c = container(prof)
    assert c["command"] == ["trtllm-serve", "serve"]
    assert c["args"][0] == "/models/llama3-70b-instruct"  # the model is positional
    flags = flag_values(c["args"])
    assert flags["--backend"] == "pytorch"
    assert (flags["--tp_size"], flags["--pp_size"], flags["--max_seq_len"]) == ("4", "1", "8192")
    assert (flags["--max_batch_size"], flags["--max_num_tokens"]) == ("64", "8192")
    assert flags["--kv_cache_free_gpu_memory_fraction"] == "0.9"
    assert "--enable_chunked_prefill" not in flags  # 8192-token context, 8192-token batches
    longer = profile.loads(PROFILES["trtllm"].read_text().replace("maxModelLen: 8192", "maxModelLen: 16384"))
    assert "--enable_chunked_prefill" in container(longer)["args"]


def test_sglang_gets_its_server_args_from_the_profile_fields() -> None:
    c = container(profile.load(PROFILES["sglang"]))
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    flags = flag_values(c["args"])
    assert flags["--model-path"] == "/models/llama3-70b-instruct"
    assert flags["--served-model-name"] == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert (flags["--tp-size"], flags["--context-length"], flags["--max-running-requests"]) == ("4", "8192", "64")
    assert (flags["--kv-cache-dtype"], flags["--mem-fraction-static"]) == ("fp8_e4m3", "0.85")
    assert "--disable-radix-cache" not in flags and "--enable-metrics" in flags


def test_prefix_caching_off_is_each_engines_own_switch(tmp_path: pathlib.Path) -> None:
    sglang = profile.load(variant(tmp_path, "sglang", **{"engine.enablePrefixCaching": False}))
    assert "--disable-radix-cache" in container(sglang)["args"]
    tgi = profile.load(variant(tmp_path, "tgi", **{"engine.enablePrefixCaching": False}))
    env = {e["name"]: e.get("value") for e in container(tgi)["env"]}
    assert env["PREFIX_CACHING"] == "0"  # TGI reads it from the environment only
    default = {e["name"] for e in container(profile.load(PROFILES["tgi"]))["env"]}
    assert "PREFIX_CACHING" not in default


def test_probes_ask_the_engines_cheap_path_and_the_gate_its_generating_one() -> None:
    for kind, probe, gate_path in (("tgi", "/health", "/health"), ("sglang", "/ready", "/health")):
        prof = profile.load(PROFILES[kind])
        c = container(prof)
        assert {c[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {probe}
        spec = verify.spec_of(
            prof, render.render(prof, planner.plan(prof)), timeout=None, endpoint=None, skip_bench=True
        )
        assert (spec.engine, spec.health_path) == (kind, gate_path)


def test_the_health_gate_looks_for_the_id_each_engine_lists() -> None:
    # TGI lists its --model-id, TensorRT-LLM 1.2 the model directory's name, the others the served name.
    expected = {
        "tgi": "/models/llama3-70b-instruct",
        "trtllm": "llama3-70b-instruct",
        "sglang": "meta-llama/Meta-Llama-3-70B-Instruct",
    }
    for kind, served in expected.items():
        prof = profile.load(PROFILES[kind])
        spec = verify.spec_of(
            prof, render.render(prof, planner.plan(prof)), timeout=None, endpoint=None, skip_bench=True
        )
        assert spec.model == served


def test_tgi_and_trtllm_requests_spell_the_output_limit_once() -> None:
    def body(engine: str) -> dict[str, Any]:
        config = workload.BenchConfig(url="http://x:8000", model="m", engine=engine, output_tokens=7)
        parsed: dict[str, Any] = json.loads(workload.request_body(config, "hi"))
        return parsed

    assert body("vllm")["max_tokens"] == body("vllm")["max_completion_tokens"] == 7
    assert body("tgi")["max_tokens"] == 7 and "max_completion_tokens" not in body("tgi")  # else: duplicate field
    assert body("trtllm")["max_tokens"] == 7 and "max_completion_tokens" not in body("trtllm")  # else: forbidden


# --- refused by name ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, changes, field, words",
    [
        ("tgi", {"engine.pipelineParallelSize": 2}, "engine.pipelineParallelSize", "TGI has no pipeline parallelism"),
        ("trtllm", {"engine.kvCacheDtype": "fp8"}, "engine.kvCacheDtype", "no KV-cache dtype flag"),
        ("trtllm", {"engine.enablePrefixCaching": False}, "engine.enablePrefixCaching", "enable_block_reuse"),
        ("sglang", {"model.name": "llama:70b"}, "model.name", "LoRA adapter"),
        ("tgi", {"placement.nodesPerCopy": 2}, "placement.nodesPerCopy", "one node only"),
    ],
)
def test_validate_refuses_a_field_the_engine_cannot_honour_naming_it_and_its_line(
    tmp_path: pathlib.Path, kind: str, changes: dict[str, Any], field: str, words: str
) -> None:
    result = run("validate", str(variant(tmp_path, kind, **changes)))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert f"{field} (line " in result.stderr and words in result.stderr, result.stderr
    assert "Traceback" not in result.output


def test_vllm_version_belongs_to_vllm_and_agrees_with_version(tmp_path: pathlib.Path) -> None:
    wrong = run("validate", str(variant(tmp_path, "tgi", **{"engine.vllmVersion": "0.33.0"})))
    assert wrong.exit_code == ExitCode.INVALID_PROFILE and "for kind tgi write engine.version" in wrong.stderr
    data = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    data["engine"] |= {"version": "0.32.0", "vllmVersion": "0.33.0"}
    with pytest.raises(Exception, match="disagree"):
        profile.loads(yaml.safe_dump(data))
    data["engine"] |= {"version": "0.32.0", "vllmVersion": "0.32.0"}
    assert profile.loads(yaml.safe_dump(data)).engine.engine_version == "0.32.0"


@pytest.mark.parametrize(
    "kind, bad, words",
    [
        ("tgi", "--max-batch-sise=4", "--max-batch-size"),  # misspelt: the flag meant is named
        ("tgi", "--num-shard=2", "engine.tensorParallelSize"),  # deployctl's own flag
        ("trtllm", "--tp-size=2", "write --tp_size"),  # click keeps underscores
        ("trtllm", "--tp_size=2", "engine.tensorParallelSize"),
        ("sglang", "--context-length=4096", "engine.maxModelLen"),
        ("sglang", "--no-such-flag", "is not a SGLang 0.5.23 flag"),
    ],
)
def test_bad_extra_args_are_refused_per_engine(tmp_path: pathlib.Path, kind: str, bad: str, words: str) -> None:
    result = run("validate", str(variant(tmp_path, kind, **{"engine.extraArgs": [bad]})))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "engine.extraArgs" in result.stderr and words in result.stderr, result.stderr


def test_good_extra_args_pass_for_each_engine(tmp_path: pathlib.Path) -> None:
    good = {"tgi": ["--trust-remote-code"], "trtllm": ["--trust_remote_code"], "sglang": ["--trust-remote-code"]}
    for kind, args in good.items():
        result = run("validate", str(variant(tmp_path, kind, **{"engine.extraArgs": args})))
        assert result.exit_code == 0, (kind, result.output)


# --- memory: each engine's rule -------------------------------------------------------------------------

MEMORY = engines.MemoryInputs(total=80.0, fraction=0.9, weights=30.0, activation=2.0, non_torch=1.0, cuda_graphs=1.5)


def test_each_engine_turns_the_same_gpu_into_kv_cache_by_its_own_rule() -> None:
    assert engines.VLLM.kv_budget(MEMORY).kv == pytest.approx(80 * 0.9 - 30 - 2 - 1 - 1.5)
    assert engines.TGI.kv_budget(MEMORY).kv == pytest.approx(80 * 0.9 * 0.90 - 30 - 2 - 1)  # graphs outside
    assert engines.TRTLLM.kv_budget(MEMORY).kv == pytest.approx((80 - 30 - 2 - 1 - 1.5) * 0.9)
    assert engines.SGLANG.kv_budget(MEMORY).kv == pytest.approx((80 - 1) * 0.9 - 30)  # static: weights + KV


def test_sglang_warns_when_its_static_fraction_leaves_too_little_for_activations_and_graphs() -> None:
    tight = engines.MemoryInputs(
        total=80.0, fraction=0.97, weights=30.0, activation=2.0, non_torch=1.0, cuda_graphs=1.5
    )
    (warning,) = engines.SGLANG.memory_warnings(tight, engines.SGLANG.kv_budget(tight))
    assert "Lower gpuMemoryUtilization to 0.95" in warning  # 79 GiB × 0.95 leaves 4.95 GiB ≥ the 4.5 needed
    assert engines.SGLANG.memory_warnings(MEMORY, engines.SGLANG.kv_budget(MEMORY)) == []


def test_the_planner_uses_the_engines_rule_and_block_size() -> None:
    plans = {kind: planner.plan(profile.load(path)) for kind, path in PROFILES.items()}
    assert plans["trtllm"].kv_cache_blocks * 32 >= plans["trtllm"].max_model_len_that_fits
    assert plans["tgi"].inputs["block_size"] == 1 and plans["trtllm"].inputs["block_size"] == 32
    for kind, plan in plans.items():
        assert plan.fits, (kind, plan.findings)
        assert plan.inputs["engine"] == kind and plan.inputs["memory_flag"] == engines.get(kind).memory_flag


# --- start-up lines and crash lines ---------------------------------------------------------------------


def log(name: str) -> str:
    return (LOGS / name).read_text()


def test_each_engines_start_up_kv_line_is_read() -> None:
    assert engines.TGI.parse_startup("p", log("tgi-startup.log")).kv_cache_tokens == 1_069_251  # type: ignore[union-attr]
    assert engines.TGI.parse_startup("p", log("tgi-shard-only.log")).kv_cache_tokens == 123_449  # type: ignore[union-attr]
    trt = engines.TRTLLM.parse_startup("p", log("trtllm-startup.log"))
    assert trt is not None and trt.kv_cache_tokens == 86_720  # the final cache, not the estimation one (8,224)
    sgl = engines.SGLANG.parse_startup("p", log("sglang-startup.log"))
    assert sgl is not None and (sgl.kv_cache_tokens, sgl.weights_gib) == (91_749, 27.57)
    sched = engines.SGLANG.parse_startup("p", log("sglang-scheduler.log"))
    assert sched is not None and (sched.max_model_len, sched.max_concurrency) == (8192, round(580364 / 8192, 2))
    for engine in engines.ENGINES.values():
        assert engine.parse_startup("p", "Traceback (most recent call last):\n") is None


@pytest.mark.parametrize(
    "kind, name, cls",
    [
        ("tgi", "tgi-oom.log", "kv_cache"),
        ("tgi", "tgi-bad-arg.log", "engine_args"),
        ("tgi", "tgi-model-path.log", "model_path"),
        ("tgi", "nccl-shm.log", "shm"),
        ("trtllm", "trtllm-oom.log", "oom"),
        ("trtllm", "trtllm-bad-arg.log", "engine_args"),
        ("trtllm", "trtllm-model-path.log", "model_path"),
        ("trtllm", "nccl-shm.log", "shm"),
        ("sglang", "sglang-kv.log", "kv_cache"),
        ("sglang", "sglang-cuda-graph.log", "oom"),
        ("sglang", "sglang-bad-arg.log", "engine_args"),
        ("sglang", "sglang-model-path.log", "model_path"),
        ("sglang", "nccl-shm.log", "shm"),
    ],
)
def test_a_crash_log_is_classified_by_the_engines_own_lines(kind: str, name: str, cls: str) -> None:
    found = rollout.classify_log(log(name), kind)
    assert found is not None and found[0] == cls, found


def test_another_engines_crash_line_does_not_classify_as_this_engines() -> None:
    # TGI's clap error is not SGLang's argparse error: the classes read the engine that runs.
    assert rollout.classify_log(log("tgi-bad-arg.log"), "sglang") is None


# --- the planner against published engine logs ------------------------------------------------------------


def test_sglangs_rule_lands_within_two_percent_of_a_published_kv_pool() -> None:
    # vllm-project/vllm issue #21348: SGLang, Qwen3-235B-A22B-FP8 on 4x H100, --tp 4
    # --mem-fraction-static 0.93, logged "KV Cache is allocated. #tokens: 367404" (bf16 KV).
    doc = {
        "apiVersion": "deployctl/v1",
        "kind": "InferenceProfile",
        "metadata": {"name": "qwen3", "namespace": "x"},
        "model": {
            "name": "qwen3",
            "config": str(ROOT / "tests" / "data" / "qwen3-235b-a22b.json"),
            "weightsDtype": "fp8",
            "source": {"pvc": "models", "path": "/models/qwen3"},
        },
        "engine": {
            "kind": "sglang",
            "image": "r/sglang@sha256:" + "0" * 64,
            "tensorParallelSize": 4,
            "maxModelLen": 32768,
            "maxNumSeqs": 8,
            "gpuMemoryUtilization": 0.93,
        },
        "hardware": {"gpu": "H100-80GB", "gpusPerNode": 8},
    }
    plan = planner.plan(profile.loads(json.dumps(doc)))
    assert plan.kv_cache_tokens / 367_404 - 1 == pytest.approx(0, abs=0.02), plan.kv_cache_tokens


def _settings(**changes: Any) -> engines.ServerSettings:
    fields: dict[str, Any] = {
        "model_path": "/models/m",
        "served_name": "m",
        "port": 8000,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_batched_tokens": None,
        "kv_cache_dtype": "auto",
        "memory_fraction": 0.9,
        "prefix_caching": True,
    }
    return engines.ServerSettings(**{**fields, **changes})


def test_kv_dtypes_keep_the_profiles_names_but_those_spelled_otherwise() -> None:
    assert base.kv_dtypes() == {d: d for d in engines.KV_CACHE_DTYPES}
    assert base.kv_dtypes(auto="", fp8="fp8_e4m3")["fp8"] == "fp8_e4m3"
    assert base.kv_dtypes(auto="")["auto"] == ""


def test_tuning_flags_write_the_batched_budget_only_when_set_and_the_kv_dtype_unless_auto() -> None:
    assert engines.VLLM.tuning_flags(_settings(), "--batched") == []
    assert engines.SGLANG.tuning_flags(_settings(max_batched_tokens=512, kv_cache_dtype="fp8"), "--batched") == [
        "--batched", "512", "--kv-cache-dtype", "fp8_e4m3",
    ]  # fmt: skip


def test_an_engine_on_one_node_refuses_a_copy_across_nodes_after_its_field_refusals() -> None:
    assert engines.VLLM.single_node is None and engines.VLLM.refusals(_settings(multi_node=True)) == []
    for engine in (engines.TGI, engines.TRTLLM, engines.SGLANG):
        found = engine.refusals(_settings(multi_node=True, pipeline_parallel=2, prefix_caching=False))
        assert found[-1] == engines.Refusal("placement.nodesPerCopy", engine.single_node or ""), engine.kind
