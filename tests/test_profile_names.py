"""Names and help in a profile, driven through the CLI as a user types it: catalog names in any case,
unknown names that show the way out, GPU product labels for GPUs outside the catalog (rendered and
matched by preflight), quoting hints for YAML's non-strings, and the profile's JSON Schema."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml
from click.testing import CliRunner

from orchestrator.apply import views
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import node_reports, preflight
from orchestrator.profile import json_schema
from orchestrator.profile import model as profile
from orchestrator.profile import pod as profile_pod

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
SCHEMA_FILE = ROOT / "orchestrator" / "data" / "profile.schema.json"
# The name `deployctl schema > profile.schema.json` writes next to a profile, so the line still
# works in a copy of an example; profiles/profile.schema.json is that file for the examples.
MODELINE = "# yaml-language-server: $schema=profile.schema.json"

BASE = """\
apiVersion: deployctl/v1
kind: InferenceProfile
metadata:
  name: names
  namespace: inference
model:
  name: meta-llama/Meta-Llama-3-8B-Instruct
  architecture: {architecture}
  source: {{pvc: models}}
engine:
  image: registry.internal/vllm@sha256:{digest}
  maxModelLen: 8192
hardware:
{hardware}
placement:
{placement}
"""


def write(
    tmp_path: pathlib.Path,
    *,
    architecture: str = "llama-3-8b",
    hardware: str = "  gpu: A100-80GB",
    placement: str = "  podLabels: {team: infra}",
) -> pathlib.Path:
    path = tmp_path / "profile.yaml"
    text = BASE.format(architecture=architecture, digest="a" * 64, hardware=hardware, placement=placement)
    path.write_text(text)
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


def rendered(path: pathlib.Path) -> dict[str, Any]:
    result = run("render", str(path), "-o", "json")
    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)["items"]
    return next(o for o in items if o["kind"] == "Deployment")


def product_values(deployment: dict[str, Any]) -> list[str] | None:
    """The values of the pod's required `nvidia.com/gpu.product` node affinity, None without one."""
    affinity = deployment["spec"]["template"]["spec"].get("affinity") or {}
    required = affinity.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    for term in required.get("nodeSelectorTerms", []):
        for expression in term["matchExpressions"]:
            if expression["key"] == "nvidia.com/gpu.product":
                return list(expression["values"])
    return None


# --- 1. catalog names in any case ---------------------------------------------------------------------


def test_gpu_and_architecture_names_are_matched_in_any_case(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, architecture="Llama-3-8B", hardware="  gpu: a100-80gb")
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "A100-80GB" in result.stdout  # the summary line names the catalog's spelling
    plan = json.loads(run("plan", str(path), "-o", "json").stdout)
    assert plan["inputs"]["gpu"] == "A100-80GB"
    assert plan["inputs"]["model"] == "llama-3-8b"


def test_a_lowercase_gpu_renders_as_its_catalog_entry(tmp_path: pathlib.Path) -> None:
    lower = rendered(write(tmp_path, hardware="  gpu: h100-80gb"))
    assert product_values(lower) == sorted(["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB", "NVIDIA-H100-PCIe"])
    obj = yaml.safe_load(run("render", str(tmp_path / "profile.yaml"), "--format", "object").stdout)
    assert obj["spec"]["hardware"]["gpu"] == "H100-80GB"


# --- 2. unknown names show the way out ------------------------------------------------------------------


def test_an_unknown_gpu_suggests_the_catalog_spelling_and_the_custom_gpu_fields(tmp_path: pathlib.Path) -> None:
    result = run("validate", str(write(tmp_path, hardware="  gpu: h100-80g")))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "hardware.gpu (line 14): unknown GPU 'h100-80g'; did you mean 'H100-80GB'?" in result.stderr
    assert "for a GPU outside the catalog, drop hardware.gpu" in result.stderr
    assert "`hardware: {memoryGiB: 179, fp8: true, productLabels: [NVIDIA-B200]}`" in result.stderr
    assert "Traceback" not in result.output


def test_an_unknown_architecture_names_model_config(tmp_path: pathlib.Path) -> None:
    result = run("validate", str(write(tmp_path, architecture="Lama-3-8b")))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "model.architecture (line 8): unknown architecture 'Lama-3-8b'; did you mean 'llama-3-8b'?" in (
        result.stderr
    )
    assert "replace model.architecture with the path of its Hugging Face config.json" in result.stderr
    assert "`model: {config: ./config.json}`" in result.stderr


# --- 3. GPU product labels ------------------------------------------------------------------------------

B200 = "  memoryGiB: 179\n  fp8: true\n  productLabels: [NVIDIA-B200]"


def test_a_custom_gpu_is_pinned_to_its_product_labels(tmp_path: pathlib.Path) -> None:
    assert product_values(rendered(write(tmp_path, hardware=B200))) == ["NVIDIA-B200"]


def test_product_labels_replace_the_catalogs_for_a_catalog_gpu(tmp_path: pathlib.Path) -> None:
    hardware = "  gpu: H100-80GB\n  productLabels: [NVIDIA-H100-80GB-HBM3]"
    assert product_values(rendered(write(tmp_path, hardware=hardware))) == ["NVIDIA-H100-80GB-HBM3"]


def test_a_custom_gpu_without_product_labels_is_refused_not_left_unpinned(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, hardware="  memoryGiB: 179")
    for command in ("validate", "render"):
        result = run(command, str(path))
        assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
        assert "hardware.memoryGiB (line 14): hardware.gpu is unset (a GPU of 179 GiB outside the catalog)" in (
            result.stderr
        )
        assert "Give them in hardware.productLabels, e.g. `productLabels: [NVIDIA-B200]`" in result.stderr
        assert "or set placement.matchGpuProduct: false" in result.stderr


def test_a_custom_gpu_with_product_matching_off_renders_without_the_constraint(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, hardware="  memoryGiB: 179", placement="  matchGpuProduct: false")
    assert product_values(rendered(path)) is None


def test_an_empty_product_label_list_is_refused(tmp_path: pathlib.Path) -> None:
    result = run("validate", str(write(tmp_path, hardware="  memoryGiB: 179\n  productLabels: []")))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "hardware.productLabels (line 15): give at least one non-empty nvidia.com/gpu.product value" in (
        result.stderr
    )


def _node(name: str, product: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product, "deployctl.dev/nvlink": "true"}
    allocatable = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def test_preflight_places_a_custom_gpu_only_on_nodes_with_its_product_label(tmp_path: pathlib.Path) -> None:
    prof = profile.load(write(tmp_path, hardware=B200))
    nodes = [_node("b200-0", "NVIDIA-B200"), _node("h100-0", "NVIDIA-H100-80GB-HBM3")]
    result = preflight.check(prof, nodes, [], deployment_exists=False)
    assert result.eligible_nodes == ["b200-0"]
    h100 = next(r for r in result.nodes if r.name == "h100-0")
    assert h100.reasons == (
        "product NVIDIA-H100-80GB-HBM3 does not match hardware.productLabels (expects NVIDIA-B200)",
    )
    refused = preflight.check(prof, nodes[1:], [], deployment_exists=False)
    assert refused.refusal is not None and "of product NVIDIA-B200" in refused.refusal


def test_inventory_names_the_catalog_gpu_of_each_product_and_the_labels_to_copy_for_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [_node("b200-0", "NVIDIA-B200"), _node("h100-0", "NVIDIA-H100-80GB-HBM3")]
    pools = node_reports.gpu_pools(nodes, [])
    assert [(p["product"], p["gpu"]) for p in pools] == [("NVIDIA-B200", None), ("NVIDIA-H100-80GB-HBM3", "H100-80GB")]
    # The cluster read is views' job (e2e); here the CLI prints what gpu_pools made of these nodes.
    monkeypatch.setattr(views, "inventory", lambda options: pools)
    result = run("inventory")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["PRODUCT", "GPU", "NVLINK", "NODES", "GPUS", "FREE"]
    assert rows[2][:2] == ["NVIDIA-B200", "-"] and rows[3][:2] == ["NVIDIA-H100-80GB-HBM3", "H100-80GB"]
    assert "hardware.productLabels: [NVIDIA-B200]" in result.stdout


# --- 4. quoting hints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("placement", "field", "written", "kind"),
    [
        ("  podLabels: {canary: yes}", "placement.podLabels.canary (line 16)", "yes", "a boolean"),
        ("  nodeSelector: {gpu: true}", "placement.nodeSelector.gpu (line 16)", "true", "a boolean"),
        ("  podAnnotations:\n    rev: 1.10", "placement.podAnnotations.rev (line 17)", "1.10", "a number"),
        ("  podAnnotations: {since: 2024-06-01}", "placement.podAnnotations.since (line 16)", "2024-06-01", "a date"),
    ],
)
def test_an_unquoted_non_string_where_a_string_belongs_says_how_to_quote_it(
    tmp_path: pathlib.Path, placement: str, field: str, written: str, kind: str
) -> None:
    result = run("validate", str(write(tmp_path, placement=placement)))
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert f'{field}: `{written}` is {kind} in YAML; quote it: "{written}"' in result.stderr
    assert "Input should be a valid string" not in result.stderr


def test_a_non_string_from_set_gets_the_same_hint(tmp_path: pathlib.Path) -> None:
    result = run("validate", str(write(tmp_path)), "--set", "placement.nodeSelector.pool=on")
    assert result.exit_code == ExitCode.INVALID_PROFILE
    assert "placement.nodeSelector.pool (from --set placement.nodeSelector.pool=on): YAML reads the value as a " in (
        result.stderr
    )
    assert "boolean (true); quote it to keep it a string" in result.stderr


def test_a_quoted_value_passes(tmp_path: pathlib.Path) -> None:
    result = run("validate", str(write(tmp_path, placement='  nodeSelector: {gpu: "true"}')))
    assert result.exit_code == 0, result.output


# --- 5. the profile's JSON Schema ---------------------------------------------------------------------------


def test_schema_command_prints_the_shipped_file() -> None:
    result = run("schema")
    assert result.exit_code == 0, result.output
    assert result.stdout == SCHEMA_FILE.read_text(encoding="utf-8"), "run scripts/gen_profile_schema.py"
    assert result.stdout == json_schema.shipped()
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == json_schema.SCHEMA_ID
    jsonschema.Draft202012Validator.check_schema(schema)
    assert yaml.safe_load(run("schema", "-o", "yaml").stdout) == schema


def test_the_schema_regenerates_with_one_command() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/gen_profile_schema.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_object_of_the_schema_forbids_unknown_keys_and_describes_its_fields() -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    objects = [schema, *schema["$defs"].values()]
    assert all(o["additionalProperties"] is False for o in objects)
    for o in objects:
        for key, prop in o["properties"].items():
            assert prop.get("description"), f"{key} has no description"
            assert prop["title"] == key
    # The YAML keys, not Python names or aliases.
    assert "productLabels" in schema["$defs"]["HardwareSpec"]["properties"]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_example_profile_names_and_passes_the_schema(path: pathlib.Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == MODELINE
    named = (path.parent / MODELINE.split("$schema=", 1)[1]).resolve()
    assert named.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8") == run("schema").stdout
    validator = jsonschema.Draft202012Validator(json.loads(named.read_text(encoding="utf-8")))
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []


def test_the_schema_rejects_a_typo_d_key() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text(encoding="utf-8"))
    doc["engine"]["tensorParalelSize"] = doc["engine"].pop("tensorParallelSize")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    problems = list(validator.iter_errors(doc))
    assert [list(e.absolute_path) for e in problems] == [["engine"]]
    assert "'tensorParalelSize' was unexpected" in problems[0].message


def test_the_schema_takes_catalog_names_in_any_case_and_offers_them(tmp_path: pathlib.Path) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    doc = yaml.safe_load(write(tmp_path, hardware="  gpu: a100-80gb").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc)) == []
    assert "A100-80GB" in schema["$defs"]["HardwareSpec"]["properties"]["gpu"]["examples"]


# --- one name type: every field that names a Kubernetes object checks it alike ---------------------

_OBJECT_NAME_FIELDS = [
    (profile_pod.KeyRef, {"key": "token"}, "name", "Secret or ConfigMap name"),
    (profile_pod.ObjectRef, {}, "name", "Secret or ConfigMap name"),
    (profile_pod.PvcVolumeSource, {}, "claimName", "PersistentVolumeClaim name"),
    (profile_pod.ConfigMapVolumeSource, {}, "name", "ConfigMap name"),
    (profile_pod.SecretVolumeSource, {}, "secretName", "Secret name"),
]


@pytest.mark.parametrize(("model", "others", "field", "what"), _OBJECT_NAME_FIELDS)
def test_every_field_naming_an_object_refuses_a_bad_name_in_the_same_words(
    model: type[pydantic.BaseModel], others: dict[str, str], field: str, what: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate({**others, field: "Bad_Name"})
    assert (
        f"'Bad_Name' is not a valid {what}: use lowercase letters, digits, '-' and '.', starting and ending with "
        "a letter or digit"
    ) in str(caught.value)
    assert caught.value.errors()[0]["loc"] == (field,)
    longest = ".".join(["a" * 63] * 4)[:253]  # a DNS-1123 subdomain may be 253 characters, no more
    assert getattr(model.model_validate({**others, field: longest}), field) == longest
    with pytest.raises(pydantic.ValidationError):
        model.model_validate({**others, field: longest + "a"})


def test_release_and_namespace_names_are_dns_labels_of_at_most_63_characters() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        profile.Metadata.model_validate({"name": "a" * 64, "namespace": "Prod"})
    text = str(caught.value)
    assert "is not a valid release name: use at most 63 lowercase letters, digits and '-'" in text
    assert "'Prod' is not a valid namespace" in text
