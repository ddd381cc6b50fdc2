"""The flag tables of SGLang, TGI and TensorRT-LLM: their generator, the committed tables, and the extraArgs check."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from types import ModuleType
from typing import Any

import pytest

from orchestrator.engines import flag_table, flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "orchestrator" / "data" / "engine_flags"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_engine_flags", ROOT / "scripts" / "gen_engine_flags.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_engine_flags", module)
    spec.loader.exec_module(module)
    return module


gen = _generator()


def by_name(options: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: o for o in options for n in o["names"] + o["negations"]}


def newest(engine: str) -> str:
    """The newest table of ``engine`` (the one a new profile gets)."""
    versions = flags.known_versions(engine)
    assert versions, engine
    return versions[-1]


# --- the generator, on small sources of each dialect ---------------------------------------------------------

ARGPARSE_MODULE = """
import argparse
from sglang.srt.choices import DTYPE_CHOICES

LOG_LEVELS = ["debug", "info", "warning"]
EXTRA = [*LOG_LEVELS, "error"]


class ServerArgs:
    model_path: str
    log_level: str = "info"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument("--model-path", "--model", type=str, required=True, help="weights")
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size")
        parser.add_argument("--mem-fraction-static", type=float, default=None)
        parser.add_argument("--log-level", type=str, choices=EXTRA, default=ServerArgs.log_level)
        parser.add_argument("--dtype", type=str, choices=DTYPE_CHOICES, default="auto")
        parser.add_argument("--disable-radix-cache", action="store_true")
        parser.add_argument("--enable-metrics", action=argparse.BooleanOptionalAction, default=False)
        parser.add_argument("--json-model-override-args", type=json.loads, default="{}")
        parser.add_argument("--lora-paths", type=str, nargs="*", default=None)
        parser.add_argument("--chunked-prefill-size", type=some_parser, default=None)
        computed = sorted(registry())
        parser.add_argument("--tool-call-parser", type=str, choices=computed)
"""
CHOICES_MODULE = 'DTYPE_CHOICES = ["auto", "half", "bfloat16"]\n'

DATACLASS_MODULE = """
from typing import List, Literal, Optional

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
from sglang.srt.choices import DTYPE_CHOICES


class Model(msgspec.Struct):
    _NS_PATH = "model"
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    tp_size: A[int, Arg(help="TP", aliases=["--tensor-parallel-size"])] = 1
    kv_cache_dtype: A[Literal["auto", "fp8_e4m3"], "KV dtype"] = "auto"
    dtype: A[str, Arg(help="dtype", choices=DTYPE_CHOICES)] = "auto"
    context_length: A[Optional[int], Arg(help="len", type_parser=human_readable_int)] = None
    disable_radix_cache: A[bool, "no prefix cache"] = False
    cuda_graph_bs: A[Optional[List[int]], "sizes"] = None
    hidden: A[bool, Arg(no_cli=True)] = False
    not_cli: int = 3
    fp8_gemm_runner_backend: A[str, Arg(help="x", cli_name="--fp8-gemm-backend")] = "auto"


_INPUT_NAMESPACES = [Model]


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--config", type=str)
"""


def test_argparse_snippet_reads_types_choices_switches_and_nargs() -> None:
    src = gen.PySource.from_texts({"sglang.srt.server_args": ARGPARSE_MODULE, "sglang.srt.choices": CHOICES_MODULE})
    opts = by_name(gen.sglang_options(src))
    assert opts["--model"] is opts["--model-path"]
    assert opts["--model-path"]["type"] == "str"
    assert opts["--tensor-parallel-size"]["dest"] == "tp_size"
    assert (opts["--tp-size"]["type"], opts["--tp-size"]["default"]) == ("int", 1)
    assert opts["--mem-fraction-static"]["type"] == "float"
    assert opts["--log-level"]["choices"] == ["debug", "info", "warning", "error"]  # a constant, followed
    assert opts["--dtype"]["choices"] == ["auto", "half", "bfloat16"]  # imported from another module
    assert opts["--disable-radix-cache"]["switch"] and opts["--disable-radix-cache"]["type"] == "bool"
    assert opts["--enable-metrics"]["names"] == ["--enable-metrics"]
    assert opts["--no-enable-metrics"]["negations"] == ["--no-enable-metrics"]
    assert opts["--json-model-override-args"]["type"] == "json"
    assert opts["--lora-paths"]["nargs"] == "*"
    assert opts["--chunked-prefill-size"]["type"] == "other"  # a type callable not modelled: not checked
    assert "choices" not in opts["--tool-call-parser"]  # computed at run time: not checked
    assert opts["--help"]["action"] == "help"


def test_dataclass_fields_become_options_as_add_cli_args_from_dataclass_makes_them() -> None:
    src = gen.PySource.from_texts({"sglang.srt.server_args": DATACLASS_MODULE, "sglang.srt.choices": CHOICES_MODULE})
    opts = by_name(gen.sglang_options(src))
    assert opts["--model"] is opts["--model-path"] and opts["--model-path"].get("required") is True
    assert opts["--tensor-parallel-size"]["dest"] == "tp_size"
    assert opts["--kv-cache-dtype"]["choices"] == ["auto", "fp8_e4m3"]  # Literal
    assert opts["--dtype"]["choices"] == ["auto", "half", "bfloat16"]
    assert opts["--context-length"]["type"] == "other"
    assert opts["--disable-radix-cache"]["action"] == "store_true"
    assert (opts["--cuda-graph-bs"]["nargs"], opts["--cuda-graph-bs"]["type"]) == ("+", "int")
    assert "--fp8-gemm-backend" in opts and "--fp8-gemm-runner-backend" not in opts
    assert "--hidden" not in opts and "--not-cli" not in opts
    assert "--config" in opts


CLAP_SOURCE = """
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum KVCacheDtype {
    #[clap(name = "fp8_e4m3fn")]
    Fp8e4m3fn,
    Fp8E5m2,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum UsageStatsLevel {
    On,
    Off,
    NoStack,
}

#[derive(Parser, Debug)]
#[clap(author, version, about, long_about = None)]
struct Args {
    /// The model.
    #[clap(default_value = "bigscience/bloom-560m", long, env)]
    model_id: String,
    #[clap(long, env)]
    num_shard: Option<usize>,
    #[clap(long, env)]
    sharded: Option<bool>,
    #[clap(long, env, value_enum)]
    kv_cache_dtype: Option<KVCacheDtype>,
    #[clap(long, env, value_enum)]
    trust_remote_code: bool,
    #[clap(default_value = "1.0", long, env)]
    cuda_memory_fraction: f32,
    #[clap(default_value = "3000", long, short, env)]
    port: u16,
    #[clap(long, env, value_delimiter = ',')]
    cuda_graphs: Option<Vec<usize>>,
    #[clap(default_value = "on", long, env)]
    usage_stats: UsageStatsLevel,
}
"""


def test_clap_struct_reads_value_enums_switches_shorts_and_defaults() -> None:
    options, notes = gen.clap_options(CLAP_SOURCE)
    opts = by_name(options)
    assert opts["--model-id"]["default"] == "bigscience/bloom-560m"
    assert (opts["--num-shard"]["type"], opts["--num-shard"]["switch"]) == ("int", False)
    assert opts["--sharded"]["choices"] == ["true", "false"]  # Option<bool> takes a value
    assert opts["--kv-cache-dtype"]["choices"] == ["fp8_e4m3fn", "fp8-e5m2"]  # name = …, else kebab-case
    assert opts["--trust-remote-code"]["switch"] and not opts["--trust-remote-code"]["negations"]
    assert opts["--cuda-memory-fraction"]["default"] == 1.0
    assert opts["-p"] is opts["--port"] and opts["--port"]["default"] == 3000
    assert (opts["--cuda-graphs"]["action"], opts["--cuda-graphs"]["delimiter"]) == ("append", ",")
    assert opts["--usage-stats"]["choices"] == ["on", "off", "no-stack"]
    assert "--version" in opts and "-V" in opts and "-h" in opts
    assert notes == []


CLICK_SOURCE = """
import click


class ChoiceWithAlias(click.Choice):
    def __init__(self, choices, aliases, case_sensitive=True):
        super().__init__(choices, case_sensitive)
        self.aliases = aliases


@click.command("serve")
@click.argument("model", type=str)
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--backend", type=ChoiceWithAlias(["pytorch", "tensorrt"], {"trt": "tensorrt"}), default="pytorch")
@click.option("--log_level", type=click.Choice(["info", "debug"]), default="info")
@click.option("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float, default=0.9)
@click.option("--trust_remote_code", is_flag=True, default=False)
@click.option("--streaming/--no-streaming", default=True)
@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options", type=str, default=None)
@click.option("--custom_module_dirs", type=click.Path(exists=True), multiple=True)
def serve(model, tensor_parallel_size, backend, log_level, free_gpu_memory_fraction, trust_remote_code,
          streaming, extra_llm_api_options, custom_module_dirs):
    pass


@click.command("other")
@click.option("--not_serve", type=int)
def other(not_serve):
    pass
"""


def test_click_command_reads_pairs_flags_choices_and_names_as_declared() -> None:
    options, _ = gen.click_options(CLICK_SOURCE, "serve")
    opts = by_name(options)
    assert opts["--tp_size"] is opts["--tensor_parallel_size"] and opts["--tp_size"]["dest"] == "tensor_parallel_size"
    assert "--tp-size" not in opts
    assert opts["--backend"]["choices"] == ["pytorch", "tensorrt", "trt"]
    assert opts["--log_level"]["choices"] == ["info", "debug"]
    assert opts["--kv_cache_free_gpu_memory_fraction"]["type"] == "float"
    assert opts["--trust_remote_code"]["switch"]
    assert (opts["--streaming"]["negations"], opts["--no-streaming"]["action"]) == (["--no-streaming"], "boolean")
    assert opts["--extra_llm_api_options"]["dest"] == "extra_llm_api_options"
    assert (opts["--custom_module_dirs"]["action"], opts["--custom_module_dirs"]["type"]) == ("append", "other")
    assert "--not_serve" not in opts


def test_table_refuses_a_flag_read_twice() -> None:
    options = [gen._opt(["--x"], "x"), gen._opt(["--x"], "y")]
    with pytest.raises(SystemExit, match="registered twice"):
        gen.table("tgi", "1.0.0", "inline", options, [], "test")


# --- the committed tables ------------------------------------------------------------------------------------

RENDERED = {
    "sglang": [
        "--tp-size", "--pp-size", "--context-length", "--mem-fraction-static", "--max-running-requests",
        "--kv-cache-dtype", "--disable-radix-cache", "--served-model-name", "--port", "--host", "--model-path",
    ],
    "tgi": [
        "--num-shard", "--max-total-tokens", "--max-input-tokens", "--max-batch-prefill-tokens",
        "--cuda-memory-fraction", "--kv-cache-dtype", "--max-concurrent-requests", "--model-id", "--port",
        "--hostname",
    ],
    "trtllm": [
        "--tp_size", "--pp_size", "--max_batch_size", "--max_num_tokens", "--kv_cache_free_gpu_memory_fraction",
        "--max_seq_len", "--port", "--host", "--backend", "--extra_llm_api_options",
    ],
}  # fmt: skip


@pytest.mark.parametrize("engine", sorted(RENDERED))
def test_each_table_loads_and_has_the_flags_deployctl_renders(engine: str) -> None:
    version = newest(engine)
    fs = flags.flag_set(engine, version)
    assert fs.version == version
    missing = [f for f in RENDERED[engine] if f not in fs.flags]
    assert missing == []
    raw = json.loads((DATA / engine / f"{version}.json").read_text(encoding="utf-8"))
    assert (raw["engine"], raw["format"], raw["version"]) == (engine, 2, version)
    assert raw["dialect"] == {"sglang": "argparse", "tgi": "clap", "trtllm": "click"}[engine]
    assert set(raw["flags"]) == {n for o in raw["options"] for n in o["names"] + o["negations"]}
    assert {o["type"] for o in raw["options"]} <= {"bool", "int", "float", "str", "json", "other", None}
    for key in ("version", "format", "generated_by", "source", "notes", "kinds", "flags", "switches", "defaults"):
        assert key in raw


def test_sglang_table_details() -> None:
    fs = flags.flag_set("sglang", newest("sglang"))
    assert fs.options["--tensor-parallel-size"] is fs.options["--tp-size"]
    assert fs.options["--model"] is fs.options["--model-path"]
    assert "--tp" not in fs.flags  # only an argparse abbreviation of --tp-size
    kv = fs.options["--kv-cache-dtype"]
    assert kv.choices is not None and {"auto", "fp8_e4m3", "fp8_e5m2"} <= set(kv.choices)
    assert fs.options["--disable-radix-cache"].switch
    assert fs.options["--trust-remote-code"].switch


def test_tgi_table_details() -> None:
    fs = flags.flag_set("tgi", newest("tgi"))
    assert fs.options["--kv-cache-dtype"].choices == ("fp8_e4m3fn", "fp8_e5m2")
    assert fs.options["--trust-remote-code"].switch
    assert fs.options["-p"] is fs.options["--port"]
    assert fs.options["--usage-stats"].choices == ("on", "off", "no-stack")


def test_trtllm_table_details() -> None:
    fs = flags.flag_set("trtllm", newest("trtllm"))
    assert fs.options["--tp_size"] is fs.options["--tensor_parallel_size"]
    assert fs.options["--kv_cache_free_gpu_memory_fraction"] is fs.options["--free_gpu_memory_fraction"]
    assert fs.options["--config"] is fs.options["--extra_llm_api_options"]
    backend = fs.options["--backend"].choices
    assert backend is not None and {"pytorch", "tensorrt", "trt", "_autodeploy"} == set(backend)
    assert "--tp-size" not in fs.flags


def test_unknown_version_names_the_known_ones_and_the_generator() -> None:
    with pytest.raises(KeyError) as e:
        flags.flag_set("tgi", "0.0.1")
    assert newest("tgi") in str(e.value) and "gen_engine_flags.py tgi 0.0.1" in str(e.value)
    with pytest.raises(KeyError, match="deployctl has them for"):
        flags.known_versions("nonsense")


def test_known_versions_sort_numerically() -> None:
    assert sorted(["0.10.0", "0.9.1", "main-00209af"], key=flag_table.version_key) == [
        "main-00209af",
        "0.9.1",
        "0.10.0",
    ]


# --- check() -------------------------------------------------------------------------------------------------

RESERVED = {
    "sglang": {"--tp-size": "engine.tensorParallelSize", "--tp": "engine.tensorParallelSize", "--port": "engine.port"},
    "tgi": {"--num-shard": "engine.tensorParallelSize", "--port": "engine.port"},
    "trtllm": {"--tp_size": "engine.tensorParallelSize", "--port": "engine.port"},
}
GOOD = {
    "sglang": [
        "--enable-metrics", "--schedule-policy", "lpm", "--watchdog-timeout=600", "--preferred-sampling-params",
        '{"top_p": 0.9}', "--stream-interval", "2", "--no-enable-tf32-matmul", "--host", "0.0.0.0",
    ],
    "tgi": [
        "--max-best-of=4", "--json-output", "--quantize", "fp8", "--rope-factor", "2.0", "--cuda-graphs", "1,2,4",
        "--sharded", "true",
    ],
    "trtllm": [
        "--trust_remote_code", "--log_level", "info", "--max_beam_width=1", "--num_postprocess_workers", "2",
        "--backend", "trt", "--config", "/etc/extra.yaml",
    ],
}  # fmt: skip


def run(engine: str, args: list[str]) -> list[tuple[str, str, str]]:
    found = flags.check(args, engine, newest(engine), RESERVED[engine])
    return [(p.arg, p.kind, p.message) for p in found]


def kinds(engine: str, args: list[str]) -> list[tuple[str, str]]:
    return [(arg, kind) for arg, kind, _ in run(engine, args)]


@pytest.mark.parametrize("engine", sorted(GOOD))
def test_good_args_pass(engine: str) -> None:
    if engine == "sglang":
        fs = flags.flag_set(engine, newest(engine))
        assert {"--enable-metrics", "--schedule-policy", "--watchdog-timeout", "--stream-interval"} <= fs.flags
    assert run(engine, GOOD[engine]) == []
    assert run(engine, []) == []


def test_unknown_flag_suggests_the_close_one() -> None:
    [(arg, kind, msg)] = run("tgi", ["--max-concurent-requests", "10"])
    assert (arg, kind) == ("--max-concurent-requests", "unknown")
    assert msg == f"--max-concurent-requests is not a TGI {newest('tgi')} flag; did you mean --max-concurrent-requests?"
    [p] = flags.check(["--max-concurent-requests", "10"], "tgi", newest("tgi"), {})
    assert p.suggestion == "--max-concurrent-requests"
    assert kinds("tgi", ["--no-such-thing-at-all"]) == [("--no-such-thing-at-all", "unknown")]


def test_click_takes_underscored_names_only_as_declared() -> None:
    [(_, kind, msg)] = run("trtllm", ["--max-beam-width", "2"])
    assert kind == "unknown" and "write --max_beam_width" in msg and "TensorRT-LLM" in msg
    [(_, kind, msg)] = run("sglang", ["--stream_interval", "2"])  # argparse does not map _ to - either
    assert kind == "unknown" and "write --stream-interval" in msg


@pytest.mark.parametrize(
    ("engine", "args", "flag"),
    [
        ("sglang", ["--enable-metrics=true"], "--enable-metrics"),
        ("tgi", ["--json-output=true"], "--json-output"),
        ("trtllm", ["--trust_remote_code=1"], "--trust_remote_code"),
    ],
)
def test_a_switch_given_a_value_is_refused(engine: str, args: list[str], flag: str) -> None:
    [(_, kind, msg)] = run(engine, args)
    assert kind == "value-on-switch" and msg.startswith(f"{flag} is a switch in ") and f"write {flag} alone" in msg


def test_a_switch_followed_by_a_value_leaves_a_positional() -> None:
    [(arg, kind, msg)] = run("tgi", ["--json-output", "true"])
    assert (arg, kind) == ("true", "stray-value") and "takes no value" in msg


@pytest.mark.parametrize(
    ("engine", "args"),
    [
        ("sglang", ["--schedule-policy"]),
        ("tgi", ["--max-best-of", "--json-output"]),
        ("trtllm", ["--log_level"]),
    ],
)
def test_a_missing_value_is_refused(engine: str, args: list[str]) -> None:
    found = run(engine, args)
    assert found[0][:2] == (args[0], "missing-value") and "needs a value" in found[0][2]
    assert len(found) == 1


def test_clap_reads_a_negative_number_as_a_flag() -> None:
    assert kinds("tgi", ["--rope-factor", "-1"]) == [("--rope-factor", "missing-value")]
    assert "--rope-factor=-1" in run("tgi", ["--rope-factor", "-1"])[0][2]
    assert run("tgi", ["--rope-factor=-1"]) == []
    assert run("sglang", ["--stream-interval", "-1"]) == []  # argparse: a value


@pytest.mark.parametrize(
    ("engine", "args", "expected"),
    [
        ("sglang", ["--schedule-policy", "lmp"], "did you mean lpm?"),
        ("tgi", ["--quantize=fp9"], "is not one of TGI"),
        ("tgi", ["--sharded", "yes"], "choices: true, false"),
        ("trtllm", ["--backend", "pytorh"], "did you mean pytorch?"),
    ],
)
def test_a_value_outside_the_choices_is_refused(engine: str, args: list[str], expected: str) -> None:
    [(_, kind, msg)] = run(engine, args)
    assert kind == "bad-choice" and expected in msg


@pytest.mark.parametrize(
    ("engine", "args", "expected"),
    [
        ("sglang", ["--stream-interval", "two"], "--stream-interval takes an integer, not 'two'"),
        ("sglang", ["--preferred-sampling-params", "{bad"], "takes JSON"),
        ("tgi", ["--max-best-of=2.5"], "--max-best-of takes an integer, not '2.5'"),
        ("tgi", ["--cuda-graphs", "1,x"], "not 'x'"),
        ("tgi", ["--rope-factor", "big"], "takes a number"),
        ("trtllm", ["--num_postprocess_workers", "many"], "takes an integer"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(engine: str, args: list[str], expected: str) -> None:
    [(_, kind, msg)] = run(engine, args)
    assert kind == "bad-value" and expected in msg


@pytest.mark.parametrize(
    ("engine", "args", "written"),
    [
        ("sglang", ["--tp-size", "2"], "--tp-size"),
        ("sglang", ["--tensor-parallel-size=2"], "--tensor-parallel-size"),  # an alias of a reserved flag
        ("sglang", ["--tp", "2"], "--tp"),
        ("tgi", ["--num-shard", "2"], "--num-shard"),
        ("tgi", ["-p", "8080"], "-p"),
        ("trtllm", ["--tp_size", "2"], "--tp_size"),
        ("trtllm", ["--tensor_parallel_size=2"], "--tensor_parallel_size"),
    ],
)
def test_reserved_flags_name_the_profile_field(engine: str, args: list[str], written: str) -> None:
    [(_, kind, msg)] = run(engine, args)
    field = "engine.port" if written in ("-p",) else "engine.tensorParallelSize"
    assert kind == "reserved"
    assert msg.startswith(f"{written} is set by deployctl from {field}; change that field instead")


def test_argparse_abbreviations_are_refused() -> None:
    [(_, kind, msg)] = run("sglang", ["--stream-interv", "2"])
    assert kind == "abbreviation" and "write --stream-interval" in msg
    [(_, kind, msg)] = run("sglang", ["--tp-s", "2"])
    assert kind == "abbreviation" and "engine.tensorParallelSize" in msg
    [(_, kind, _)] = run("sglang", ["--disable-", "x"])
    assert kind == "ambiguous"
    assert kinds("tgi", ["--max-best", "2"]) == [("--max-best", "unknown")]  # clap takes no prefixes


@pytest.mark.parametrize("engine", sorted(GOOD))
def test_positional_arguments_are_refused(engine: str) -> None:
    [(arg, kind, msg)] = run(engine, ["my-model"])
    assert (arg, kind) == ("my-model", "stray-value") and "positional" in msg
    assert kinds(engine, ["--", "x"])[0][1] == "stray-value"


@pytest.mark.parametrize("engine", sorted(GOOD))
def test_help_exits(engine: str) -> None:
    assert kinds(engine, ["--help"]) == [("--help", "exits")]


def test_both_value_forms_are_read() -> None:
    assert run("trtllm", ["--max_beam_width", "2"]) == run("trtllm", ["--max_beam_width=2"]) == []
    assert run("tgi", ["-g5"]) == run("tgi", ["-g", "5"]) == run("tgi", ["--graceful-termination-timeout=5"]) == []
    assert kinds("tgi", ["-gfive"]) == [("-gfive", "bad-value")]
