"""The e2e suite runs what users install: the wheel's `deployctl`, from a venv without the checkout.

`make test-e2e` (and `make test`, `make demo`) build the sdist, the wheel from it, and install that
wheel into .cache/wheel-venv; pytest then runs from that venv's console script. This module says why
a run would test something else instead (the checkout's modules through an editable install,
`python -m pytest` from the repo root, or PYTHONPATH), so the session can stop before it starts
rather than pass against code nobody installs. 0.1.0's wheel lacked orchestrator.engines while
1,712 tests passed against the editable checkout.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

# A developer's shortcut for one test against a worktree's edits; CI never sets it (.ci/run unsets it).
FROM_CHECKOUT_ENV = "DEPLOYCTL_E2E_FROM_CHECKOUT"


def _installed(module_file: str) -> bool:
    """Whether a module file was installed (pip puts it under site-packages), not found in a source tree."""
    return "site-packages" in Path(module_file).resolve().parts


def problems() -> list[str]:
    """Why this interpreter's `deployctl` is not an installed wheel independent of the checkout; [] when it is."""
    found: list[str] = []
    if os.environ.get("PYTHONPATH"):
        found.append(f"PYTHONPATH is set ({os.environ['PYTHONPATH']})")
    script = Path(sys.executable).parent / "deployctl"
    if not script.is_file():
        found.append(f"{script} does not exist: the deployctl wheel is not installed in this venv")
    # Where the tests' own imports resolve (conftest and helpers import orchestrator in-process).
    spec = importlib.util.find_spec("orchestrator")
    if spec is not None and spec.origin and not _installed(spec.origin):
        found.append(
            f"the tests import orchestrator from the checkout ({spec.origin}; `python -m pytest` puts it first)"
        )
    # Where the deployctl processes' imports resolve, from a neutral working directory.
    probe = subprocess.run(
        [sys.executable, "-c", "import orchestrator; print(orchestrator.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        found.append(f"{sys.executable} cannot import orchestrator: {probe.stderr.strip()[-300:]}")
    elif not _installed(probe.stdout.strip()):
        found.append(f"this venv's orchestrator is the checkout ({probe.stdout.strip()}): an editable install")
    return found
