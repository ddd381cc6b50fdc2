"""The InferenceProfile CRD and object form: generated from the profile models, read like a profile file.

The e2e suite (e2e/test_crd_admission.py) applies the CRD to a real kube-apiserver, which checks that the
schema is structural and runs the CEL rules; here the schema is held to the models it comes from.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from orchestrator import errors
from orchestrator.controller import crd
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILES = [*sorted((ROOT / "profiles").glob("*.yaml")), ROOT / "tests" / "golden" / "every-option.profile.yaml"]


def _fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every field path of a pydantic model, nested models and union members included."""
    out: set[tuple[str, ...]] = set()
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        out.add(path)
        for sub in _models_in(field.annotation):
            out |= _fields(sub, path)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or getattr(annotation, "__metadata__", ()):
        found += _models_in(arg)
    if hasattr(annotation, "__origin__") and not found:
        for arg in getattr(annotation, "__args__", ()):
            found += _models_in(arg)
    return found


def _schema_fields(node: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for name, sub in (node.get("properties") or {}).items():
        out.add((*prefix, name))
        out |= _schema_fields(sub, (*prefix, name))
        if sub.get("type") == "array":
            out |= _schema_fields(sub.get("items") or {}, (*prefix, name))
    return out


def test_the_spec_schema_has_every_profile_field_and_nothing_else() -> None:
    wanted = {p for p in _fields(profile.Profile) if p[0] not in ("apiVersion", "kind", "metadata")}
    assert _schema_fields(crd.spec_schema()) == wanted


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for sub in (node.get("properties") or {}).values():
        nodes += _walk(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            nodes += _walk(node[key])
    return nodes


def test_the_schema_is_structural_every_node_typed_no_union_no_json_schema_only_keywords() -> None:
    for node in _walk(crd.spec_schema()):
        assert node.get("type") in ("object", "array", "string", "integer", "number", "boolean"), node
        assert not {"anyOf", "oneOf", "allOf", "$ref", "title", "examples", "default", "const"} & set(node), node
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, "OpenAPI 3.0 takes a flag"


def test_limits_and_enums_come_from_the_models() -> None:
    spec = crd.spec_schema()["properties"]
    engine = spec["engine"]["properties"]
    assert engine["tensorParallelSize"]["minimum"] == 1 and engine["tensorParallelSize"]["maximum"] == 64
    assert engine["kvCacheDtype"]["enum"] == ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert engine["gpuMemoryUtilization"] == {**engine["gpuMemoryUtilization"], "minimum": 0, "exclusiveMinimum": True}
    # Catalog names are matched in any case, as the loader does: a CEL rule, not an enum.
    (gpu_rule,) = spec["hardware"]["properties"]["gpu"]["x-kubernetes-validations"]
    assert "enum" not in spec["hardware"]["properties"]["gpu"]
    assert gpu_rule["rule"].startswith("self.lowerAscii() in [") and "'h100-80gb'" in gpu_rule["rule"]
    assert "H100-80GB" in gpu_rule["message"] and "hardware.productLabels" in gpu_rule["message"]
    (arch_rule,) = spec["model"]["properties"]["architecture"]["x-kubernetes-validations"]
    assert "'llama-3.1-405b'" in arch_rule["rule"] and "model.config" in arch_rule["message"]
    assert spec["gate"]["properties"]["smoke"]["properties"]["slo"]["additionalProperties"] == {"type": "string"}
    source = spec["model"]["properties"]["source"]
    assert {"pvc", "hostPath", "path", "mountPath"} <= set(source["properties"])
    assert "has(self.pvc) != has(self.hostPath)" in source["x-kubernetes-validations"][0]["rule"]
    assert set(crd.spec_schema()["required"]) == {"model", "engine", "hardware"}


def test_the_definition_has_a_status_subresource_kstatus_conditions_and_printer_columns() -> None:
    definition = crd.definition()
    assert definition["metadata"]["name"] == "inferenceprofiles.deployctl.dev"
    (version,) = definition["spec"]["versions"]
    assert version["subresources"] == {"status": {}} and version["storage"] is True
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert {"type", "status", "reason", "message", "observedGeneration"} <= set(conditions["items"]["properties"])
    assert [c["name"] for c in version["additionalPrinterColumns"]][:3] == ["Ready", "Reason", "Revision"]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_a_profile_and_its_object_are_the_same_profile_and_render_the_same_bytes(path: pathlib.Path) -> None:
    prof = profile.load(path)
    obj = profile.to_object(prof)
    assert obj["apiVersion"] == "deployctl.dev/v1" and set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    again = profile.loads(yaml.safe_dump(obj), base_dir=path.parent)
    assert again.model_dump() == prof.model_dump() and again.spec_hash() == prof.spec_hash()
    plan = planner.plan(prof)
    assert render.to_yaml(render.render(again, plan)) == render.to_yaml(render.render(prof, plan))


def test_an_object_read_back_from_the_cluster_drops_server_fields_and_tool_labels() -> None:
    prof = profile.load(ROOT / "profiles" / "prod-tp4.yaml")
    obj = profile.to_object(prof)
    obj["metadata"] |= {"uid": "u-1", "resourceVersion": "42", "generation": 3, "managedFields": [{}]}
    obj["metadata"]["labels"] |= {"kustomize.toolkit.fluxcd.io/name": "apps", "app.kubernetes.io/instance": "x"}
    obj["status"] = {"observedGeneration": 2}
    assert profile.from_object(obj, "cluster").spec_hash() == prof.spec_hash()


def test_an_error_in_an_object_names_the_field_and_its_line() -> None:
    text = """\
apiVersion: deployctl.dev/v1
kind: InferenceProfile
metadata: {name: llm}
spec:
  model: {name: m, architecture: llama-3-8b, source: {pvc: models}}
  engine:
    image: registry.internal/vllm@sha256:%s
    maxModelLen: 4096
    tensorParalelSize: 2
  hardware: {gpu: H100-80GB}
""" % ("0" * 64)
    with pytest.raises(errors.InvalidProfile) as caught:
        profile.loads(text, source="cr.yaml")
    assert "engine.tensorParalelSize (line 9): unknown key; did you mean 'tensorParallelSize'?" in caught.value.message


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"kind": "Other", "spec": {}}, "must be kind InferenceProfile"),
        ({"kind": "InferenceProfile"}, "with a spec mapping"),
        ({"kind": "InferenceProfile", "spec": {"metadata": {}}}, "spec.metadata belongs at the top"),
    ],
)
def test_a_malformed_object_is_refused_in_one_sentence(doc: dict[str, Any], says: str) -> None:
    with pytest.raises(errors.InvalidProfile, match=says):
        profile.loads(yaml.safe_dump({"apiVersion": "deployctl.dev/v1", "metadata": {"name": "x"}, **doc}))
