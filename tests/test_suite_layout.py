"""The two suites share one pytest session (`make test` runs `pytest tests e2e`).

Neither folder is a package, so pytest imports each test module by its basename: a name used in
both folders stops the whole session at collection, which running one suite alone never shows.
"""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_no_test_module_name_is_used_in_both_suites() -> None:
    unit = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    e2e = {p.name for p in (ROOT / "e2e").glob("test_*.py")}
    assert unit and e2e
    assert not unit & e2e, f"rename one of each: {sorted(unit & e2e)} (e2e modules often end in _cluster)"
