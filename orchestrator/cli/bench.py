"""`deployctl bench`'s options and the one call behind them, spelt both our way and `vllm bench serve`'s.

People arrive with `vllm bench serve` command lines in their shell history and CI scripts, so each
option that means the same thing answers to both names (click shows both in ``--help``):
``--url``/``--base-url``, ``--concurrency``/``--max-concurrency``, ``--requests``/``--num-prompts``,
``--input-tokens``/``--random-input-len``, ... The vLLM names keep vLLM's meaning; where ours
differs (we always send ``ignore_eos``, only generate random prompts) the flag is accepted or
refused with the reason. docs/benchmark.md has the table.

The API key (``--api-key``, or ``OPENAI_API_KEY`` as vLLM's client reads it) goes to the request
headers only: it is not part of the benchmark config, so no report, result file or message holds it.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

import click

from orchestrator import conventions, errors
from orchestrator.cli import options as cli_options

if TYPE_CHECKING:
    pass

F = TypeVar("F", bound=Callable[..., object])

# vLLM's --dataset-name choices that mean "prompts from somewhere else": we only generate random ones.
RANDOM_DATASET = "random"


def _dataset(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and value != RANDOM_DATASET:
        raise click.BadParameter(
            f"{value!r} is not supported: deployctl bench sends generated random prompts only, like vLLM's "
            f"`--dataset-name random`; drop --dataset-name (or pass random), or run `vllm bench serve` "
            f"for the {value} dataset",
            ctx,
            param,
        )
    return value


def _metadata(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for item in value:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE; write e.g. --metadata tp=4", ctx, param)
        pairs[key.strip()] = val.strip()
    return pairs


class BenchOptions(TypedDict):
    """What click passes `deployctl bench` besides -o: one key per option below, by its parameter name."""

    url: str
    model: str | None
    endpoint: str
    api_key: str | None
    engine: str
    concurrency: int
    requests_: int
    input_tokens: int
    output_tokens: int
    warmup: int
    dataset_name: str | None
    ignore_eos: bool
    duration: float | None
    request_rate: float | None
    burstiness: float
    seed: int
    timeout: float
    processes: int | None
    max_error_rate: float
    save: str | None
    save_result: bool
    result_dir: str | None
    result_filename: str | None
    label: str | None
    metadata: dict[str, str]


class _Decorator(Protocol):
    def __call__(self, fn: F, /) -> F: ...


_OPTIONS: list[_Decorator] = [
    click.option(
        "--url",
        "--base-url",
        "url",
        required=True,
        help="Base URL of the OpenAI-compatible server (a trailing /v1 is dropped).",
    ),
    click.option(
        "--model",
        help="Served model name, as GET /v1/models lists it (default: the first model listed there, as vLLM does).",
    ),
    click.option(
        "--endpoint",
        type=click.Choice(conventions.ENDPOINTS),
        default=conventions.CHAT_PATH,
        show_default=True,
        help="API path: chat messages, or a plain prompt (vLLM bench's default /v1/completions).",
    ),
    click.option(
        "--api-key",
        envvar=["DEPLOYCTL_BENCH_API_KEY", "OPENAI_API_KEY"],
        help="Sent as 'Authorization: Bearer KEY' to the server's /v1 API (vllm serve --api-key); "
        "default: $OPENAI_API_KEY, as vLLM's benchmark client reads it. Never stored or printed.",
    ),
    click.option(
        "--engine",
        type=click.Choice(["vllm", "tgi", "trtllm", "sglang"]),
        default="vllm",
        show_default=True,
        help="The server's engine: it decides how a request spells its output limit (TGI refuses both spellings, "
        "TensorRT-LLM the newer).",
    ),
    click.option(
        "--concurrency", "--max-concurrency", "concurrency", type=click.IntRange(1), default=16, show_default=True
    ),
    click.option("--requests", "--num-prompts", "requests_", type=click.IntRange(1), default=64, show_default=True),
    click.option(
        "--input-tokens",
        "--random-input-len",
        "--input-len",
        "input_tokens",
        type=click.IntRange(1),
        default=512,
        show_default=True,
    ),
    click.option(
        "--output-tokens",
        "--random-output-len",
        "--output-len",
        "output_tokens",
        type=click.IntRange(2),
        default=128,
        show_default=True,
    ),
    click.option("--warmup", "--num-warmups", "warmup", type=click.IntRange(0), default=4, show_default=True),
    click.option(
        "--dataset-name",
        callback=_dataset,
        help="Accepted for vLLM command lines: only 'random' (generated prompts, what we always send).",
    ),
    click.option(
        "--ignore-eos",
        is_flag=True,
        help="Accepted for vLLM command lines: every request already sends ignore_eos.",
    ),
    click.option(
        "--duration",
        type=cli_options.Duration(0.1),
        help="Stop after this long (30s, 5m) instead of --requests. Either way, the first Ctrl-C or SIGTERM stops "
        "sending, lets the requests in flight finish and prints the report.",
    ),
    click.option(
        "--request-rate",
        type=click.FloatRange(0.001),
        help="Open-loop Poisson arrivals per second; 'inf' (vLLM's default) is a closed loop of --concurrency streams.",
    ),
    click.option("--burstiness", type=click.FloatRange(0.01), default=1.0, show_default=True),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option(
        "--timeout", type=cli_options.Duration(1), default=600, show_default=True, help="Per request: 90s, 10m."
    ),
    click.option(
        "--processes",
        type=click.IntRange(1),
        help="Client processes to spread the streams over (default: one per 128 streams, at most one per core).",
    ),
    click.option(
        "--max-error-rate",
        type=click.FloatRange(0, 1),
        default=0.0,
        show_default=True,
        help="Exit 5 when more than this fraction of the requests failed.",
    ),
    click.option("--save", type=click.Path(dir_okay=False), help="Write the JSON report and an HTML report beside it."),
    click.option(
        "--save-result",
        is_flag=True,
        help="Also write the result file `vllm bench serve --save-result` writes (vLLM's keys and file name).",
    ),
    click.option("--result-dir", type=click.Path(file_okay=False), help="Directory of the --save-result file."),
    click.option("--result-filename", help="File name of the --save-result file (default: vLLM's pattern)."),
    click.option("--label", help="Prefix of the --save-result file name (vLLM's --label; default: the backend)."),
    click.option(
        "--metadata",
        multiple=True,
        callback=_metadata,
        metavar="KEY=VALUE",
        help="Recorded in the --save-result file (repeat the option for more pairs).",
    ),
]


def options(fn: F) -> F:
    """Every `deployctl bench` option, in --help order."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def run(output_format: str, opts: BenchOptions) -> str | None:
    """Run the benchmark the options ask for, print and save its report; return why it failed, or None."""
    from orchestrator.gate import bench, bench_config, vllm_result  # bench pulls in multiprocessing and pydantic models

    save_result = opts["save_result"]
    if not save_result:
        placing = {
            "--result-dir": opts["result_dir"],
            "--result-filename": opts["result_filename"],
            "--label": opts["label"],
            "--metadata": opts["metadata"],
        }
        stray = [flag for flag, value in placing.items() if value]
        if stray:
            raise errors.UsageError(
                f"{', '.join(stray)} only place the --save-result file, which was not asked for; add --save-result"
            )
    api_key: str | None = opts["api_key"] or None
    url = bench_config.endpoint_url(opts["url"])
    model = opts["model"] if opts["model"] is not None else _first_model(url, api_key)
    rate = opts["request_rate"]
    config = bench_config.config_for(
        url,
        model=model,
        engine=opts["engine"],
        endpoint=opts["endpoint"],
        concurrency=opts["concurrency"],
        requests=opts["requests_"],
        input_tokens=opts["input_tokens"],
        output_tokens=opts["output_tokens"],
        warmup=opts["warmup"],
        duration=opts["duration"],
        # vLLM's default rate, inf, sends everything at once under --max-concurrency: our closed loop.
        request_rate=None if rate is not None and math.isinf(rate) else rate,
        burstiness=opts["burstiness"],
        seed=opts["seed"],
        timeout=opts["timeout"],
        processes=opts["processes"],
    )
    report = bench.run(config, api_key=api_key, stop_on_signals=True)
    click.echo(report.to_json() if output_format == "json" else bench.format_table(report))
    if opts["save"]:
        for written in bench.save(report, pathlib.Path(opts["save"])):
            click.echo(f"wrote {written}", err=True)
    if save_result:
        path = vllm_result.write(
            report,
            label=opts["label"],
            result_dir=opts["result_dir"],
            result_filename=opts["result_filename"],
            metadata=opts["metadata"],
        )
        click.echo(f"wrote {path}", err=True)
    return report.failure_reason(opts["max_error_rate"])


def _first_model(url: str, api_key: str | None) -> str:
    """The model vLLM's benchmark picks without --model: the first that /v1/models lists."""
    from orchestrator import http  # late: httpx is not needed to parse options

    try:
        models = http.served_models(url, api_key=api_key)
    except errors.EndpointError as e:
        hint = " (pass --api-key or set OPENAI_API_KEY)" if http.is_unauthorized(e) else ""
        raise errors.EndpointError(
            f"--model not given and the server's model list could not be read: {e.message}{hint}"
        ) from e
    if not models:
        raise errors.UsageError(f"--model not given and {url}/v1/models lists no model; pass --model")
    return models[0]
