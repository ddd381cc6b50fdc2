"""The helm binary the chart tests run: .cache/bin/helm, built from source by e2e/cluster/build.sh helm.

Without it those tests skip on a workstation, but fail where the chart's equality with the Jinja2
render must be proven: under CI (``CI`` set) or with ``DEPLOYCTL_REQUIRE_HELM=1``, which
``make test`` and ``make test-lowest`` set (both build helm first).
"""

from __future__ import annotations

import os
import pathlib

import pytest

HELM = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "bin" / "helm"


def required() -> bool:
    """Whether a missing helm fails the chart tests instead of skipping them."""
    return bool(os.environ.get("CI")) or os.environ.get("DEPLOYCTL_REQUIRE_HELM") == "1"


def path(helm: pathlib.Path = HELM) -> pathlib.Path:
    """The helm binary; a skip when it is not built, a failure when it must be."""
    if not helm.exists():
        if required():
            pytest.fail(f"{helm} is missing; build it first (e2e/cluster/build.sh helm, or make build)")
        pytest.skip(f"{helm} is not built yet; run e2e/cluster/build.sh helm")
    return helm
