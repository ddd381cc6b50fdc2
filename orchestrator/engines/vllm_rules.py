"""The cross-flag rules of vLLM's ``validate_parsed_serve_args``, which ``vllm serve`` runs right after parsing.

Each rule reads the parsed values by dest (``get``) and says which dest to blame and why vLLM refuses to
start, or None; the extraArgs check (``engines.vllm_args``) runs a rule for a version whose table has all
the dests it reads.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.engines.flag_table import Json

# (dests the rule reads, the rule: (dest to blame, message) or None). From vLLM's validate_parsed_serve_args,
# which `vllm serve` runs right after parsing; a rule applies to a version whose table has all its dests.
_Get = Callable[[str], Json]
_Rule = Callable[[_Get], "tuple[str, str] | None"]


def _auto_tool_choice(get: _Get) -> tuple[str, str] | None:
    if get("enable_auto_tool_choice") and not get("tool_call_parser"):
        return "enable_auto_tool_choice", (
            "--enable-auto-tool-choice needs --tool-call-parser as well (the parser for the model's tool-call "
            "format, e.g. --tool-call-parser hermes); vLLM refuses to start without it"
        )
    return None


def _log_outputs(get: _Get) -> tuple[str, str] | None:
    if get("enable_log_outputs") and not get("enable_log_requests"):
        return "enable_log_outputs", (
            "--enable-log-outputs needs --enable-log-requests as well; vLLM refuses to start without it"
        )
    return None


def _keep_alive(get: _Get) -> tuple[str, str] | None:
    value = get("sse_keep_alive_interval")
    if isinstance(value, int) and value < 0:
        return "sse_keep_alive_interval", (
            f"--sse-keep-alive-interval {value} is negative and vLLM refuses it; write 0 (no keep-alive "
            "comments) or a positive number of seconds"
        )
    return None


def _per_request_metrics(get: _Get) -> tuple[str, str] | None:
    if get("enable_per_request_metrics") and get("disable_log_stats"):
        return "enable_per_request_metrics", (
            "--enable-per-request-metrics needs vLLM's engine statistics, which --disable-log-stats switches "
            "off; drop one of them"
        )
    return None


def _grpc_port(get: _Get) -> tuple[str, str] | None:
    if get("grpc_port") is None:
        return None
    if get("grpc"):
        return "grpc_port", (
            "--grpc and --grpc-port exclude each other and vLLM refuses both; drop one (--grpc serves gRPC on "
            "--port instead)"
        )
    return "grpc_port", (
        "--grpc-port needs VLLM_USE_RUST_FRONTEND=1 in the server's environment, which deployctl does not set, "
        "so vLLM refuses to start; remove it"
    )


def _multi_port_external_lb(get: _Get) -> tuple[str, str] | None:
    if not get("data_parallel_multi_port_external_lb"):
        return None
    size, local = get("data_parallel_size") or 1, get("data_parallel_size_local")
    blame = "data_parallel_multi_port_external_lb"
    flag = "--data-parallel-multi-port-external-lb"
    if get("grpc") or get("uds") is not None:
        return blame, f"{flag} does not support --grpc or --uds"
    if bool(get("ssl_keyfile")) != bool(get("ssl_certfile")):
        return blame, "--ssl-keyfile and --ssl-certfile must be given together"
    if get("api_server_count") not in (None, 1):
        return blame, f"{flag} needs --api-server-count 1"
    if get("data_parallel_rank") is not None:
        return blame, f"{flag} sets --data-parallel-rank itself; remove it"
    if get("data_parallel_external_lb") or get("data_parallel_hybrid_lb"):
        return blame, f"{flag} cannot be combined with --data-parallel-external-lb or --data-parallel-hybrid-lb"
    if not isinstance(size, int) or not isinstance(local, int) or size < 2 or local < 2 or local > size or size % local:
        return blame, (
            f"{flag} needs --data-parallel-size > 1 and --data-parallel-size-local >= 2 that divides it "
            f"(got {size} and {local})"
        )
    return None


RULES: tuple[tuple[frozenset[str], _Rule], ...] = (
    (frozenset({"enable_auto_tool_choice", "tool_call_parser"}), _auto_tool_choice),
    (frozenset({"enable_log_outputs", "enable_log_requests"}), _log_outputs),
    (frozenset({"sse_keep_alive_interval"}), _keep_alive),
    (frozenset({"enable_per_request_metrics", "disable_log_stats"}), _per_request_metrics),
    (frozenset({"grpc_port", "grpc"}), _grpc_port),
    (frozenset({"data_parallel_multi_port_external_lb", "data_parallel_size_local"}), _multi_port_external_lb),
)
