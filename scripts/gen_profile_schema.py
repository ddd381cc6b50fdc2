#!/usr/bin/env python3
"""Write orchestrator/data/profile.schema.json, the profile's JSON Schema, from the pydantic models.

It also writes the same bytes to profiles/profile.schema.json, which the example profiles name in
their first line (`$schema=profile.schema.json`): the name a copied profile finds next to it once
`deployctl schema > profile.schema.json` wrote it there, as docs/profile-reference.md says.

The files are generated, never edited: change orchestrator/profile/model.py, run this script, commit them
(`make docs-reference` runs it with the other generators). ``--check`` exits 1 when a committed
file is not what the models give now; tests/test_profile_names.py checks the same.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing the package

from orchestrator.profile import json_schema  # noqa: E402

SCHEMA_PATH = ROOT / "orchestrator" / json_schema.DATA_FILE
EXAMPLES_SCHEMA_PATH = ROOT / "profiles" / "profile.schema.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed schema is out of date")
    args = parser.parse_args(argv)
    text = json_schema.text()
    stale = 0
    for path in (SCHEMA_PATH, EXAMPLES_SCHEMA_PATH):
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current != text:
                print(f"{path.relative_to(ROOT)} is out of date; run scripts/gen_profile_schema.py", file=sys.stderr)
                stale = 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
