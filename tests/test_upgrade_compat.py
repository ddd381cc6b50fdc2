"""Upgrading deployctl itself, without a cluster: this CRD against the one 0.1.0 installed, `deployctl
version`, and the controller install `render --format controller` gives.

e2e/test_upgrade.py does the upgrade on a real API server; docs/upgrading.md is the procedure.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import orchestrator
from orchestrator.cli import app as cli
from orchestrator.controller import crd
from orchestrator.errors import ExitCode
from orchestrator.records import releases
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
OLD_CRD = ROOT / "e2e" / "fixtures" / "upgrade" / "v0.1.0" / "crd.yaml"
IMAGE = "registry.internal/deployctl/controller@sha256:" + "ab" * 32

# Keywords whose value bounds what a node accepts from below or above: the new one may only widen.
_LOWER = ("minimum", "minLength", "minItems", "minProperties")
_UPPER = ("maximum", "maxLength", "maxItems", "maxProperties")


_MEMBERSHIP = re.compile(r"^(?P<subject>.+) in \[(?P<items>[^\]]*)\]$")


def _widens(old_rule: str, new_rule: str) -> bool:
    """Whether ``new_rule`` is ``old_rule``'s membership test (``X in [...]``, the catalog keys) over a
    list that holds every old item: it accepts all the old rule did."""
    old, new = _MEMBERSHIP.match(old_rule), _MEMBERSHIP.match(new_rule)
    if old is None or new is None or old["subject"] != new["subject"]:
        return False

    def items(match: re.Match[str]) -> set[str]:
        return {item.strip() for item in match["items"].split(",")}

    return items(old) <= items(new)


_GUARD = re.compile(r"^!has\(self\.([A-Za-z_][A-Za-z0-9_]*)\) \|\| ")


def _guarded_by_a_new_field(rule: str, old: dict[str, Any]) -> bool:
    """A rule that begins ``!has(self.f) || …`` where ``f`` is a field the old schema did not have holds
    for every object the old schema accepted: none of them can set ``f``."""
    guard = _GUARD.match(rule)
    return guard is not None and guard[1] not in old.get("properties", {})


def stricter(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """Where schema ``new`` refuses something schema ``old`` accepted (an empty list: it accepts
    every object the old one did). Conservative: a changed CEL rule or pattern counts as stricter."""
    found: list[str] = []
    where = path or "(root)"
    if old.get("type") != new.get("type"):
        found.append(f"{where}: type {old.get('type')} -> {new.get('type')}")
    if old.get("nullable") and not new.get("nullable"):
        found.append(f"{where}: no longer nullable")
    if set(new.get("required", [])) - set(old.get("required", [])):
        found.append(f"{where}: newly required {sorted(set(new['required']) - set(old.get('required', [])))}")
    if "enum" in new and not set(old.get("enum", [object()])) <= set(new["enum"]):
        found.append(f"{where}: enum narrowed to {new['enum']}")
    for key in _LOWER:
        if key in new and (key not in old or new[key] > old[key]):
            found.append(f"{where}: {key} {old.get(key)} -> {new[key]}")
    for key in _UPPER:
        if key in new and (key not in old or new[key] < old[key]):
            found.append(f"{where}: {key} {old.get(key)} -> {new[key]}")
    for key in ("pattern", "format", "exclusiveMinimum", "exclusiveMaximum"):
        if key in new and new[key] != old.get(key):
            found.append(f"{where}: {key} {old.get(key)} -> {new[key]}")
    old_rules = {r["rule"] for r in old.get("x-kubernetes-validations", [])}
    for rule in new.get("x-kubernetes-validations", []):
        if rule["rule"] in old_rules or any(_widens(o, rule["rule"]) for o in old_rules):
            continue
        if not _guarded_by_a_new_field(rule["rule"], old):
            found.append(f"{where}: new or changed CEL rule {rule['rule']!r}")
    if old.get("x-kubernetes-preserve-unknown-fields") and not new.get("x-kubernetes-preserve-unknown-fields"):
        found.append(f"{where}: unknown fields no longer kept")
    for name, old_sub in old.get("properties", {}).items():
        if name not in new.get("properties", {}):
            if not new.get("x-kubernetes-preserve-unknown-fields"):
                found.append(f"{path}.{name}: field removed (the API server would prune it)")
            continue
        found += stricter(old_sub, new["properties"][name], f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            found += stricter(old[key], new[key], f"{path}[]" if key == "items" else f"{path}{{}}")
    return found


def _served(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in definition["spec"]["versions"] if v["served"]}


def _old_crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(OLD_CRD.read_text(encoding="utf-8"))
    return doc


# --- the CRD ---------------------------------------------------------------------------------------


def test_this_crd_serves_every_version_0_1_0s_served_and_accepts_every_object_it_accepted() -> None:
    old, new = _old_crd(), crd.definition()
    assert (new["spec"]["group"], new["spec"]["names"]["kind"]) == (old["spec"]["group"], old["spec"]["names"]["kind"])
    assert new["spec"]["scope"] == old["spec"]["scope"]
    for name, version in _served(old).items():
        assert name in _served(new), f"0.1.0's objects are {name}; this CRD must still serve it"
        old_schema = version["schema"]["openAPIV3Schema"]
        new_schema = _served(new)[name]["schema"]["openAPIV3Schema"]
        assert stricter(old_schema, new_schema) == []
        assert "status" in _served(new)[name].get("subresources", {}), "the controller writes status through it"


def _catalog_rule(schema: dict[str, Any]) -> dict[str, Any]:
    """The CEL rule that holds model.architecture to the catalog's keys."""
    rule: dict[str, Any] = schema["properties"]["spec"]["properties"]["model"]["properties"]["architecture"][
        "x-kubernetes-validations"
    ][0]
    return rule


def test_a_catalog_rule_over_more_keys_accepts_everything_the_old_one_did() -> None:
    schema = _served(_old_crd())["v1"]["schema"]["openAPIV3Schema"]
    widened = copy.deepcopy(schema)
    _catalog_rule(widened)["rule"] = _catalog_rule(widened)["rule"].replace("]", ", 'gpt-oss-120b']")
    assert stricter(schema, widened) == []


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda s: s["properties"]["spec"].setdefault("required", []).append("airgap"), "newly required"),
        (
            lambda s: s["properties"]["status"]["properties"]["conditions"]["items"]["properties"]["status"].update(
                enum=["True", "False"]
            ),
            "enum narrowed",
        ),
        (lambda s: s["properties"]["spec"]["properties"].pop("gate"), "field removed"),
        (
            lambda s: s["properties"]["spec"]["properties"]["engine"]["properties"]["maxNumSeqs"].update(maximum=2),
            "maximum",
        ),
        (
            lambda s: s["properties"]["spec"]["properties"]["model"]["x-kubernetes-validations"].append(
                {"rule": "false", "message": "no"}
            ),
            "CEL rule",
        ),
        (lambda s: _catalog_rule(s).update(rule=_catalog_rule(s)["rule"].replace("'llama-3-8b', ", "")), "CEL rule"),
    ],
)
def test_the_compatibility_check_catches_a_schema_that_refuses_what_the_old_one_took(change: Any, says: str) -> None:
    schema = _served(_old_crd())["v1"]["schema"]["openAPIV3Schema"]
    narrowed = copy.deepcopy(schema)
    change(narrowed)
    assert any(says in problem for problem in stricter(schema, narrowed))
    assert stricter(schema, copy.deepcopy(schema)) == []


# --- deployctl version -----------------------------------------------------------------------------


def test_version_json_names_the_record_formats_crd_chart_and_flag_tables() -> None:
    result = CliRunner().invoke(cli.main, ["version", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["deployctl"] == orchestrator.__version__
    assert data["record_format"] == {"writes": releases.RECORD_FORMAT, "reads": list(releases.RECORD_FORMATS_READ)}
    assert data["crd"] == {"name": crd.NAME, "group": crd.GROUP, "version": crd.VERSION}
    chart = yaml.safe_load((ROOT / "charts" / render.CHART_NAME / "Chart.yaml").read_text(encoding="utf-8"))
    assert data["chart"] == {"name": chart["name"], "version": chart["version"]}
    assert data["engines"]["vllm"]["flag_sets"] == data["vllm_flag_sets"]
    assert all(e["default"] in e["flag_sets"] for e in data["engines"].values())
    text = CliRunner().invoke(cli.main, ["version"]).stdout
    assert f"Release records: writes format {releases.RECORD_FORMAT}, reads 1, 2, 3, 4, 5\n" in text
    assert f"CRD: {crd.NAME} {crd.VERSION}; chart: {render.CHART_NAME} {orchestrator.__version__}" in text


# --- render --format controller --------------------------------------------------------------------


def _render_controller(*args: str) -> Any:
    return CliRunner().invoke(cli.main, ["render", "--format", "controller", *args])


def test_render_controller_starts_with_its_namespace_and_puts_every_object_there() -> None:
    result = _render_controller("--image", IMAGE, "--controller-namespace", "ops-deployctl")
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert (docs[0]["kind"], docs[0]["metadata"]["name"]) == ("Namespace", "ops-deployctl")
    namespaced = [d for d in docs[1:] if not d["kind"].startswith("Cluster")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"ops-deployctl"}
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "ops-deployctl"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE


def test_render_controller_without_image_is_a_usage_error_naming_the_flag() -> None:
    result = _render_controller()
    assert result.exit_code == ExitCode.USAGE
    assert "needs --image REGISTRY/deployctl-controller@sha256:" in result.stderr
    assert "sha256:" + "0" * 64 not in result.stdout, "no placeholder digest"


@pytest.mark.parametrize(
    "args, says",
    [
        (("--image", "registry.internal/deployctl/controller:0.2.0"), "is not pinned by digest"),
        (("--image", IMAGE + "0"), "is not pinned by digest"),
        (("--image", IMAGE, "--controller-namespace", "Deployctl_System"), "is not a namespace name"),
        (("--image", IMAGE, "--controller-namespace", "x" * 64), "is not a namespace name"),
    ],
)
def test_render_controller_refuses_an_unpinned_image_or_a_bad_namespace_with_exit_2(
    args: tuple[str, ...], says: str
) -> None:
    result = _render_controller(*args, "-o", "json")
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert says in result.stderr and "Traceback" not in result.output
    assert "items" not in result.stdout, "nothing rendered"


def test_a_new_rule_counts_as_stricter_unless_it_only_speaks_of_a_field_the_old_schema_lacked() -> None:
    old = {"type": "object", "properties": {"podMonitor": {"type": "object"}}}
    rule = {"rule": "!has(self.alerts) || has(self.podMonitor)", "message": "m"}
    assert stricter(old, {**old, "x-kubernetes-validations": [rule]}) == []
    old_field = {"rule": "!has(self.podMonitor) || self.podMonitor.size() > 0", "message": "m"}
    assert stricter(old, {**old, "x-kubernetes-validations": [old_field]}) != []
    unguarded = {"rule": "has(self.podMonitor)", "message": "m"}
    assert stricter(old, {**old, "x-kubernetes-validations": [unguarded]}) != []
