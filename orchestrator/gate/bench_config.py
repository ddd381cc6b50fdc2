"""A benchmark's configuration from what a user typed (`deployctl bench`) or a profile's ``gate.smoke``.

Both end in a :class:`~orchestrator.gate.workload.BenchConfig`; a value that can never work is a
UsageError naming the option, before anything is sent.
"""

from __future__ import annotations

import math
import urllib.parse
from typing import TYPE_CHECKING

import pydantic

from orchestrator import errors, http
from orchestrator.gate.workload import BenchConfig

if TYPE_CHECKING:
    from orchestrator.profile import model as profile_mod

# What `run_smoke` has always allowed one smoke request, whatever the profile's overall bound.
SMOKE_REQUEST_TIMEOUT_CAP_S = 120.0


def endpoint_url(url: str) -> str:
    """The server's base URL as we call it: http(s) only, no trailing slash, no OpenAI-style ``/v1``.

    OpenAI clients take ``http://host:8000/v1`` as their base URL; we add ``/v1/...`` ourselves,
    so that habit would ask for ``/v1/v1/chat/completions`` and get a 404 for every request.
    A URL that can never work (no http(s) scheme, no host) is a UsageError.
    """
    base = http.check_url(url)
    if urllib.parse.urlsplit(base).path.endswith("/v1") and base.endswith("/v1"):  # not http://v1
        return base.removesuffix("/v1").rstrip("/")
    return base


def config_for(url: str, **settings: object) -> BenchConfig:
    """A BenchConfig from what a user typed: the URL normalised, a bad value a UsageError (exit 1).

    ``settings`` are BenchConfig fields. Values pydantic refuses, and infinite or NaN numbers
    (an infinite burstiness never draws an arrival time), become one message naming the option.
    """
    base = endpoint_url(url)
    for name, value in settings.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise errors.UsageError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    try:
        return BenchConfig.model_validate({"url": base, **settings})
    except pydantic.ValidationError as e:
        problems = []
        for err in e.errors():
            option = "--" + ".".join(str(part) for part in err["loc"]).replace("_", "-")
            problems.append(f"{option}: {err['msg']}" if err["loc"] else err["msg"])
        raise errors.UsageError(f"invalid benchmark settings: {'; '.join(problems)}") from e


def config_from_profile(profile: profile_mod.Profile, url: str) -> BenchConfig:
    """The smoke benchmark a profile's ``gate.smoke`` section asks for, sent to ``url``.

    The whole run is bounded by ``timeoutSeconds`` (``requests`` is the cap within it), and one
    request may take that long too, but never more than two minutes.
    """
    smoke = profile.gate.smoke
    seconds = float(smoke.timeoutSeconds)
    return BenchConfig(
        url=url,
        model=profile.model.name,
        engine=profile.engine.kind,
        input_tokens=smoke.inputTokens,
        output_tokens=smoke.outputTokens,
        duration=seconds,
        timeout=min(seconds, SMOKE_REQUEST_TIMEOUT_CAP_S),
        **smoke.model_dump(include={"concurrency", "requests", "warmup"}),  # the same names in both
    )
