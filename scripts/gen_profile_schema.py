#!/usr/bin/env python3
"""Write orchestrator/data/profile.schema.json, the profile's JSON Schema, from the pydantic models.

The file is generated, never edited: change orchestrator/profile.py, run this script, commit both
(`make docs-reference` runs it with the other generators). ``--check`` exits 1 when the committed
file is not what the models give now; tests/test_profile_names.py checks the same.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing the package

from orchestrator import json_schema  # noqa: E402

SCHEMA_PATH = ROOT / "orchestrator" / json_schema.DATA_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed schema is out of date")
    args = parser.parse_args(argv)
    text = json_schema.text()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is out of date; run scripts/gen_profile_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
