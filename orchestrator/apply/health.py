"""The health gate: every new pod answers its engine's health path 200 and lists the served model in /v1/models.

Pods are reached through the URLs the pipeline hands in (port-forwards through the API server,
or the profile's endpoint); this module only decides, with one deadline for all of them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping

from orchestrator import errors, http


@dataclasses.dataclass
class HealthReport:
    ok: bool
    targets: dict[str, str]  # target -> "healthy" or what was wrong
    elapsed: float
    unauthorized: str | None = None  # the server refused our API key (HTTP 401/403): what it said

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "targets": self.targets, "elapsed_s": round(self.elapsed, 2)}

    def explain(self) -> str:
        bad = [f"{t}: {why}" for t, why in self.targets.items() if why != "healthy"]
        return "; ".join(bad) or "all healthy"


def wait_healthy(
    targets: Mapping[str, str],
    model: str,
    *,
    timeout: float,
    interval: float = 1.0,
    path: str = "/health",
    progress: Callable[[str], None] = lambda _msg: None,
    api_key: str | None = None,
) -> HealthReport:
    """Poll each ``name -> base URL`` until all answer ``path`` and serve ``model``, or the deadline passes.

    ``path`` is asked without credentials (vLLM leaves /health open), /v1/models with ``api_key``.
    A refused key ends the wait at once: waiting longer does not change the key.
    """
    start = time.monotonic()
    if not targets:
        # all() of nothing is True: an empty list must not pass the gate unchecked.
        return HealthReport(False, {"(no pods)": "no new pods were found to check"}, 0.0)
    state = {name: "not checked yet" for name in targets}
    while True:
        for name, url in targets.items():
            if state[name] == "healthy":
                continue
            state[name], refused = _check_one(url, model, path, api_key)
            if refused is not None:
                return HealthReport(False, state, time.monotonic() - start, unauthorized=refused)
        if all(v == "healthy" for v in state.values()):
            return HealthReport(True, state, time.monotonic() - start)
        if time.monotonic() - start >= timeout:
            return HealthReport(False, state, time.monotonic() - start)
        waiting = [n for n, v in state.items() if v != "healthy"]
        progress(f"waiting for {path} on {', '.join(waiting)} ({state[waiting[0]]})")
        time.sleep(interval)


def _check_one(url: str, model: str, path: str, api_key: str | None) -> tuple[str, str | None]:
    """The target's state, and what the server said when it refused the key (else None)."""
    result = http.check_health(url, timeout=5.0, path=path)
    if not result.ok:
        return f"{path}: {result.detail}", None
    try:
        models = http.served_models(url, timeout=5.0, api_key=api_key)
    except errors.EndpointError as e:
        return f"/v1/models: {e.message}", (e.message if http.is_unauthorized(e) else None)
    if model not in models:
        # The ids are the server's words: a served name that Kubernetes expanded could hold a Secret's value.
        listed = errors.excerpt(", ".join(repr(m) for m in models), secrets=(api_key,)) if models else "nothing"
        return f"/v1/models lists {listed}, not {errors.excerpt(repr(model))}", None
    return "healthy", None
