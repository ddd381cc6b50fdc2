#!/usr/bin/env python3
"""Print pip constraints that pin every runtime dependency of deployctl to its declared lower bound.

`make test-lowest` installs deployctl with these pins and runs the tests, so the lower bounds in
pyproject.toml's `[project] dependencies` are the ones tested; this script reads them from there,
never from a second list. One `name==version` line per dependency, in the order declared:

    python3 scripts/lowest_constraints.py > constraints.txt
    pip install -c constraints.txt -e .

Every dependency must declare exactly one lower bound (`>=`) and an upper bound (`<`); the script
exits 1 naming the one that does not, so a dependency added without a tested range fails the job.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10; `make test-lowest` installs tomli there
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# name[extras] specifier, specifier ; marker (PEP 508 without URLs, which a range cannot have)
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?P<specs>[^;]*)(;.*)?$")
_SPECIFIER = re.compile(r"^\s*(?P<op>~=|===|==|!=|<=|>=|<|>)\s*(?P<version>[A-Za-z0-9.*+!_-]+)\s*$")


def lowest_pins(requirements: list[str]) -> list[str]:
    """``name==low`` for each requirement; ValueError naming the first one without a range."""
    pins = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise ValueError(f"{requirement!r} is not a requirement this script can read")
        specs = [s for s in match["specs"].split(",") if s.strip()]
        parsed = [_SPECIFIER.match(s) for s in specs]
        if not all(parsed):
            raise ValueError(f"{requirement!r}: cannot read its version specifiers")
        ops = [p["op"] for p in parsed if p]
        lower = [p["version"] for p in parsed if p and p["op"] == ">="]
        if len(lower) != 1 or "<" not in ops:
            raise ValueError(
                f"{requirement!r} needs one tested lower bound and an upper bound, as in 'name>=LOW,<NEXT_MAJOR'"
            )
        pins.append(f"{match['name']}=={lower[0]}")
    return pins


def main() -> int:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    try:
        pins = lowest_pins(project.get("dependencies", []))
    except ValueError as e:
        print(f"{PYPROJECT.name} [project] dependencies: {e}", file=sys.stderr)
        return 1
    print("\n".join(pins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
