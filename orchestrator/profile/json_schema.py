"""The profile's JSON Schema (draft 2020-12), generated from the pydantic models of orchestrator/profile/model.py.

Editors (yaml-language-server, through a `# yaml-language-server: $schema=…` first line) and CI
validators read it to catch a typo'd key or a wrong type before deployctl runs. `deployctl schema`
prints it; ``orchestrator/data/profile.schema.json`` holds the same text, shipped in the wheel and
named by the example profiles, and scripts/gen_profile_schema.py rewrites it after a model changes.

The schema says what a JSON Schema can: keys, types, ranges, enums, required fields, no unknown
keys. What needs deployctl itself (catalog names in any case, extraArgs flag tables, the VRAM
math) is judged by `deployctl validate`. Pure: models in, plain data out.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from orchestrator.catalog import lookup as catalog
from orchestrator.profile import model as profiles

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://deployctl.dev/schemas/v1/profile.schema.json"
DATA_FILE = "data/profile.schema.json"  # inside the orchestrator package


def generate() -> dict[str, Any]:
    """The profile's JSON Schema as a mapping: pydantic's, with the draft, an id and the catalog's names."""
    schema = profiles.Profile.model_json_schema(mode="validation")
    defs: dict[str, Any] = schema.get("$defs", {})
    # Catalog keys as examples, not an enum: deployctl accepts them in any case (a100-80gb), which a
    # JSON Schema enum cannot say; editors still offer them as completions.
    defs["HardwareSpec"]["properties"]["gpu"]["examples"] = catalog.gpu_keys()
    defs["ModelSpec"]["properties"]["architecture"]["examples"] = catalog.architecture_keys()
    for model in [schema, *defs.values()]:
        for key, prop in model.get("properties", {}).items():
            prop["title"] = key  # pydantic's "Allowegresscidrs"; an editor's hover should show the key as written
    return {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        **schema,
        "title": f"deployctl {profiles.KIND} ({profiles.API_VERSION})",
        "description": "A deployctl profile: one YAML document per deployment. Field by field: "
        "docs/profile-reference.md; `deployctl validate` checks what a schema cannot (catalog names, extraArgs, "
        "the VRAM math).",
    }


def text() -> str:
    """The schema as committed in orchestrator/data/profile.schema.json, byte for byte."""
    return json.dumps(generate(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def shipped() -> str:
    """The schema file the package carries (what an installed deployctl's editors may point at)."""
    return resources.files("orchestrator").joinpath(DATA_FILE).read_text(encoding="utf-8")
