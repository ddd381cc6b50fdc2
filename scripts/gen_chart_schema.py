"""Write charts/vllm-inference/values.schema.json from the pydantic model of the chart's values.

The schema is generated, never edited: change ``orchestrator.render.chart_values.Values``, run this script,
commit both. ``--check`` exits 1 when the committed file is not what the models give now (CI and
tests/test_chart.py run it that way).

References are inlined and pydantic's per-field titles dropped: the schema is read by Helm's
validator and by editors through the ``yaml-language-server`` line of values.yaml, and a flat
schema with only descriptions is what both show best.

Two keys are added that the pydantic model does not hold, because Helm, not deployctl, puts them
into the values when this chart is a dependency of an umbrella chart: ``global`` (Helm copies the
parent's globals into every subchart) and ``enabled`` (the usual ``condition:
vllm-inference.enabled`` of the dependency). The schema forbids unknown keys, so without them
``helm template`` of any umbrella chart fails. deployctl never writes either.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing the package

from orchestrator.controller import crd  # noqa: E402
from orchestrator.render import chart_values  # noqa: E402

SCHEMA_PATH = ROOT / "charts" / "vllm-inference" / "values.schema.json"

# The keys Helm itself sets in a subchart's values (see the module docstring); the chart ignores both.
UMBRELLA_KEYS: dict[str, dict[str, Any]] = {
    "global": {
        "type": "object",
        "description": "Helm's global values, copied from a parent chart into every subchart; this chart reads "
        "none of them.",
    },
    "enabled": {
        "type": "boolean",
        "description": "Read by a parent chart's `condition: vllm-inference.enabled` to include or leave out this "
        "chart; the chart itself ignores it.",
    },
}


def generate() -> str:
    """The schema text, byte for byte as it must be committed."""
    raw = chart_values.Values.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Values of the vllm-inference chart",
        **_clean(crd.inline_refs(raw, defs)),
    }
    clashes = UMBRELLA_KEYS.keys() & schema["properties"].keys()
    assert not clashes, f"chart_values.Values must not define {sorted(clashes)}: Helm sets them in a subchart"
    schema["properties"].update(UMBRELLA_KEYS)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _clean(node: Any, *, is_properties: bool = False) -> Any:
    """Drop pydantic's generated titles; a key inside "properties" is a value name, never a title."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _clean(value, is_properties=key == "properties" and not is_properties)
        for key, value in node.items()
        if is_properties or key != "title"
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed schema is out of date")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(
                f"{SCHEMA_PATH.relative_to(ROOT)} is out of date; run scripts/gen_chart_schema.py",
                file=sys.stderr,
            )
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
