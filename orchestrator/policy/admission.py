"""The InferencePolicy rules at admission: a ValidatingAdmissionPolicy, its binding and the default policy.

`render --format admission` emits these three objects. The ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1) takes the InferencePolicy objects as its parameters (paramKind);
its binding selects every InferencePolicy, so the API server evaluates the rules once per policy,
and a create or update of an InferenceProfile is refused when any policy that applies to its
namespace refuses it: the same "each applicable policy must pass" as ``policy.check``. The rules
are orchestrator/policy/rules.py's, each validation's CEL made from the same table entry as the
Python check, and its message names the rule.

With no InferencePolicy at all the binding would allow everything (parameterNotFoundAction
Allow: a cluster must not refuse every profile because a policy is missing), so the safe-default
policy ``default`` ships with it. One difference stays: a namespace that no policy applies to gets
the safe default from the controller, and no rule at admission.

Pure: plain dicts out.
"""

from __future__ import annotations

from orchestrator.policy import model as policy
from orchestrator.policy import rules as policy_rules
from orchestrator.profile import model as profiles

NAME = "deployctl-inference-policy"
LABELS = {"app.kubernetes.io/name": "deployctl", "app.kubernetes.io/component": "admission"}
_APPLIES = "!has(params.spec.namespaces) || params.spec.namespaces.exists(ns, ns == request.namespace)"


def objects() -> list[dict[str, object]]:
    """The default InferencePolicy, the ValidatingAdmissionPolicy and its binding, in apply order."""
    return [default_policy(), validating_policy(), binding()]


def default_policy() -> dict[str, object]:
    """The safe defaults as an InferencePolicy for every namespace: edit it to allow more."""
    return {
        "apiVersion": policy.API_VERSION,
        "kind": policy.KIND,
        "metadata": {"name": policy.DEFAULT_NAME, "labels": LABELS},
        "spec": {},
    }


def validations() -> list[dict[str, str]]:
    """One validation per rule of the table, skipped for a policy that does not apply to the namespace."""
    found = []
    for rule in policy_rules.RULES:
        text = f"deployctl policy rule {rule.id}: {rule.message()}"
        found.append(
            {
                "expression": f"!variables.applies || ({rule.cel()})",
                "messageExpression": f"{_cel_string(text)} + ' (InferencePolicy ' + params.metadata.name + ')'",
                "reason": "Forbidden",
            }
        )
    return found


def _admission_object(kind: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": NAME, "labels": LABELS},
        "spec": spec,
    }


def validating_policy() -> dict[str, object]:
    return _admission_object(
        "ValidatingAdmissionPolicy",
        {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": policy.API_VERSION, "kind": policy.KIND},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [profiles.CRD_GROUP],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["inferenceprofiles"],
                    }
                ]
            },
            # Only what changes the spec is judged: the controller's finalizer and its removal (a
            # metadata update) must go through even for an object a policy tightened since refuses.
            "matchConditions": [
                {"name": "spec-written", "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec"}
            ],
            "variables": [{"name": "applies", "expression": _APPLIES}],
            "validations": validations(),
        },
    )


def binding() -> dict[str, object]:
    return _admission_object(
        "ValidatingAdmissionPolicyBinding",
        {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
        },
    )


def _cel_string(text: str) -> str:
    if '"' in text or "\\" in text:
        raise ValueError(f"a rule message must hold no double quote or backslash: {text}")
    return f'"{text}"'
