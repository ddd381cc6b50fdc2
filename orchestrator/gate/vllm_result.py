"""`--save-result`: the benchmark report as the JSON file `vllm bench serve --save-result` writes.

Users keep dashboards and scripts that read vLLM's result files, so this file uses vLLM's keys
for the same figures (``mean_ttft_ms``, ``p99_itl_ms``, ``request_throughput``, ``completed``,
``num_prompts``, ``max_concurrency``, ``date``, ``backend``, ``model_id`` ...) and vLLM's file
name, ``{label}-{request_rate}qps-concurrency{N}-{model}-{%Y%m%d-%H%M%S}.json`` in the current
directory unless ``--result-dir``/``--result-filename`` say otherwise (vLLM's
``compute_result_filename`` in ``vllm/benchmarks/serve.py``). Figures vLLM has no name for
(``error_rate``, the client load) stay in ``--save``'s report, not here.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib

from orchestrator import errors
from orchestrator.gate import bench_report, workload

# vLLM's figure families and the percentiles it prints by default ("ttft,tpot,itl" at 99, plus the
# median and mean it always writes); we also have p95 and e2el, under the same naming rule.
_FAMILIES = ("ttft", "tpot", "itl", "e2el")
_STATS = ("mean", "median", "std", "p95", "p99")


def backend_of(config: workload.BenchConfig) -> str:
    """vLLM's ``--backend`` name for what we send: ``openai-chat`` for chat, ``openai`` for completions."""
    return "openai" if config.endpoint == workload.COMPLETIONS_PATH else "openai-chat"


def _rate(config: workload.BenchConfig) -> float | str:
    # vLLM writes "inf" for "everything at once", which is our closed loop under max_concurrency.
    return config.request_rate if config.request_rate is not None else "inf"


def result(
    report: bench_report.BenchReport, *, label: str | None, now: datetime.datetime, metadata: dict[str, str]
) -> dict[str, object]:
    """The result document, keys in vLLM's order: setup, metadata, traffic, then the figures."""
    config = report.config
    backend = backend_of(config)
    doc: dict[str, object] = {
        "date": now.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": config.model,
        "tokenizer_id": config.model,
        "num_prompts": config.requests,
        **metadata,
        "request_rate": _rate(config),
        "burstiness": config.burstiness,
        "max_concurrency": config.concurrency,
        "duration": report.duration,
        "completed": report.completed,
        "failed": report.failed,
        "total_input_tokens": report.total_input_tokens,
        "total_output_tokens": report.total_output_tokens,
        "request_throughput": report.request_throughput,
        "request_goodput": None,
        "output_throughput": report.output_throughput,
        "total_token_throughput": report.total_token_throughput,
        "max_output_tokens_per_s": report.max_output_tokens_per_s,
        "max_concurrent_requests": report.max_concurrent_requests,
    }
    for family in _FAMILIES:
        for stat in _STATS:
            key = f"{stat}_{family}_ms"
            doc[key] = getattr(report, key)
    return doc


def result_path(
    config: workload.BenchConfig,
    *,
    label: str | None,
    now: datetime.datetime,
    result_dir: str | None,
    result_filename: str | None,
) -> pathlib.Path:
    """Where vLLM would write this run's result: its default name, or ``--result-filename``, under ``--result-dir``."""
    rate = _rate(config)
    rate_text = str(float(rate)) if not isinstance(rate, str) else "inf"  # vLLM prints the float: 10.0qps
    model = config.model.split("/")[-1]
    name = result_filename or (
        f"{label or backend_of(config)}-{rate_text}qps-concurrency{config.concurrency}-{model}-"
        f"{now.strftime('%Y%m%d-%H%M%S')}.json"
    )
    return pathlib.Path(result_dir, name) if result_dir else pathlib.Path(name)


def write(
    report: bench_report.BenchReport,
    *,
    label: str | None = None,
    result_dir: str | None = None,
    result_filename: str | None = None,
    metadata: dict[str, str] | None = None,
    now: datetime.datetime | None = None,
) -> pathlib.Path:
    """Write the vLLM-shaped result file and return its path; an unwritable place is a UsageError."""
    now = now or datetime.datetime.now()  # vLLM stamps local time
    path = result_path(report.config, label=label, now=now, result_dir=result_dir, result_filename=result_filename)
    doc = result(report, label=label, now=now, metadata=metadata or {})
    # json.dumps would write NaN for a missing figure; vLLM's readers expect numbers or null.
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in doc.items()}
    try:
        if result_dir:
            os.makedirs(result_dir, exist_ok=True)
        path.write_text(json.dumps(clean), encoding="utf-8")
    except OSError as e:
        raise errors.UsageError(
            f"--save-result: cannot write {path} ({e.strerror or e}); choose a writable --result-dir"
        ) from e
    return path
