"""InferencePolicy: the safe default, each rule, which policies apply, and the admission objects
made from the same rule table.

The CEL itself runs on the real API server in e2e/test_policy_cluster.py, over the same table of cases
(tests/data/policy_cases.yaml) that the Python checks are held to here.
"""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator import errors
from orchestrator.cli import app as cli
from orchestrator.controller import crd
from orchestrator.policy import admission
from orchestrator.policy import model as policy
from orchestrator.policy import rules as policy_rules
from orchestrator.profile import model as profiles

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = yaml.safe_load((ROOT / "tests" / "data" / "policy_cases.yaml").read_text())
NAMESPACE = "team-a"


def case_profile(sections: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> profiles.Profile:
    doc: dict[str, Any] = {
        "apiVersion": profiles.API_VERSION,
        "kind": profiles.KIND,
        "metadata": {"name": "llm", "namespace": namespace},
        **copy.deepcopy(CASES["base"]),
    }
    for key, value in (sections or {}).items():
        doc[key] = {**doc.get(key, {}), **value}
    return profiles.loads(json.dumps(doc))


def rules(violations: list[policy.Violation]) -> list[str]:
    return sorted({v.rule for v in violations})


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_each_case_of_the_table_is_refused_by_exactly_its_rules(case: dict[str, Any]) -> None:
    spec = policy.PolicySpec.model_validate(case["policy"])
    found = policy.check(case_profile(case.get("profile")), [policy.Policy("p", spec)])
    assert rules(found) == sorted(case["refused"])


def test_every_rule_has_a_case_that_it_refuses() -> None:
    refused = {r for c in CASES["cases"] for r in c["refused"]}
    assert refused == {r.id for r in policy_rules.RULES}


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_profiles_pass_the_safe_default(path: pathlib.Path) -> None:
    assert policy.check(profiles.load(path)) == []


def test_without_any_policy_the_safe_default_refuses_hostpath_root_fsgroup_unconfined_and_system_priority() -> None:
    prof = case_profile(
        {
            "model": {"name": "m", "architecture": "llama-3-8b", "source": {"hostPath": "/"}},
            "engine": {"fsGroup": 0},
            "placement": {
                "priorityClassName": "system-node-critical",
                "podAnnotations": {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined"},
                "tolerations": [{"operator": "Exists"}],
            },
        }
    )
    found = policy.check(prof, [])
    assert rules(found) == ["host-path", "priority-class", "root-fsgroup", "toleration", "unconfined"]
    assert {v.policy for v in found} == {policy.SAFE_DEFAULT}


def test_a_policy_for_another_namespace_leaves_the_safe_default_in_force() -> None:
    allows = policy.Policy("elsewhere", policy.PolicySpec(namespaces=["other"], allowHostPath=True))
    prof = case_profile({"model": {"name": "m", "architecture": "llama-3-8b", "source": {"hostPath": "/data"}}})
    assert rules(policy.check(prof, [allows])) == ["host-path"]
    assert policy.check(case_profile(namespace="other").model_copy(), [allows]) == []


def test_where_two_policies_apply_the_profile_must_satisfy_both() -> None:
    loose = policy.Policy("loose", policy.PolicySpec(allowHostPath=True))
    strict = policy.Policy("strict", policy.PolicySpec(namespaces=[NAMESPACE], allowedSecrets=[]))
    prof = case_profile(
        {
            "model": {
                "name": "m",
                "architecture": "llama-3-8b",
                "source": {"hostPath": "/d"},
                "credentialsSecret": "t",
            },
        }
    )
    found = policy.check(prof, [loose, strict])
    assert [(v.policy, v.rule) for v in found] == [("strict", "host-path"), ("strict", "secret")]


def test_the_refusal_names_the_object_field_value_rule_policy_and_the_fix() -> None:
    prof = case_profile({"rollout": {"progressDeadlineSeconds": 2147483647}})
    text = policy.describe(prof, policy.check(prof))
    assert text.startswith(f"InferenceProfile {NAMESPACE}/llm is refused by policy: rollout.progressDeadlineSeconds")
    assert "'2147483647'" in text and "rule progress-deadline" in text and "ceilings.progressDeadlineSeconds" in text
    assert "Nothing was written" in text and "deployctl.dev/retry" in text


def test_a_policy_object_that_does_not_validate_is_refused_naming_it_and_the_field() -> None:
    with pytest.raises(errors.InvalidInstall) as e:
        policy.from_object({"metadata": {"name": "team"}, "spec": {"allowHostPath": "sometimes"}})
    assert "InferencePolicy team: spec.allowHostPath" in e.value.message
    with pytest.raises(errors.InvalidInstall):
        policy.from_object({"metadata": {"name": "team"}, "spec": {"allowHostpath": True}})  # unknown field


def test_the_matcher_takes_names_and_prefixes_ending_in_a_star() -> None:
    assert policy_rules.matches("models", "models")
    assert not policy_rules.matches("models", "models-2")
    assert policy_rules.matches("llama-*", "llama-70b") and not policy_rules.matches("llama-*", "mistral")
    assert policy_rules.matches("*", "") and not policy_rules.matches("", "x")


# --- the admission objects, from the same table ---------------------------------------------------


def test_the_admission_policy_holds_one_validation_per_rule_with_its_cel_and_name() -> None:
    validations = admission.validating_policy()["spec"]["validations"]
    assert len(validations) == len(policy_rules.RULES)
    for rule, validation in zip(policy_rules.RULES, validations, strict=True):
        assert validation["expression"] == f"!variables.applies || ({rule.cel()})"
        assert f"deployctl policy rule {rule.id}: " in validation["messageExpression"]
        assert f"params.spec.{rule.param}" in rule.cel() or f"ceilings.{rule.param}" in rule.cel()


def test_admission_judges_an_absent_field_as_its_profile_default() -> None:
    for rule in policy_rules.RULES:
        if isinstance(rule, policy_rules.CeilingRule):
            default = rule.value(case_profile())
            assert (f": {default}) <=" in rule.cel()) == (default is not None), rule.id
    assert str(policy_rules._DEFAULT_TOLERATION_KEYS) in policy_rules.TOLERATIONS.cel


def test_the_binding_takes_every_policy_as_params_and_denies() -> None:
    spec = admission.binding()["spec"]
    assert spec["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    assert spec["validationActions"] == ["Deny"] and spec["policyName"] == admission.NAME
    vap = admission.validating_policy()["spec"]
    assert vap["paramKind"] == {"apiVersion": "deployctl.dev/v1", "kind": "InferencePolicy"}
    assert vap["failurePolicy"] == "Fail"
    # A metadata-only update (the finalizer, its removal on delete) is never judged.
    assert vap["matchConditions"][0]["expression"] == "request.operation == 'CREATE' || object.spec != oldObject.spec"


def test_the_shipped_default_policy_is_the_safe_default() -> None:
    shipped = policy.from_object(admission.default_policy())
    assert shipped.spec == policy.PolicySpec() and shipped.spec.namespaces is None


def test_the_policy_crd_is_cluster_scoped_and_has_every_spec_field() -> None:
    definition = crd.policy_definition()
    assert definition["spec"]["scope"] == "Cluster"
    spec = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == set(policy.PolicySpec.model_fields)
    assert set(spec["properties"]["ceilings"]["properties"]) == set(policy.Ceilings.model_fields)
    assert spec["properties"]["allowedGateHosts"]["type"] == "array"


@pytest.mark.parametrize(
    "fmt, kinds",
    [
        ("policy-crd", ["CustomResourceDefinition"]),
        ("admission", ["InferencePolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]),
    ],
)
def test_render_formats_for_the_policy_need_no_profile(fmt: str, kinds: list[str]) -> None:
    result = CliRunner().invoke(cli.main, ["render", "--format", fmt])
    assert result.exit_code == 0, result.output
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout) if d] == kinds


def test_the_refusal_quoted_in_docs_security_is_the_one_admission_gives() -> None:
    page = " ".join((ROOT / "docs" / "security.md").read_text().split())
    (host_path,) = [r for r in policy_rules.RULES if r.id == "host-path"]
    assert f"`deployctl policy rule host-path: {host_path.message()} (InferencePolicy default)`" in page
    for field in policy.PolicySpec.model_fields:
        assert f"| `{field}` |" in page, f"docs/security.md's table lacks {field}"
