"""The InferenceProfile CustomResourceDefinition (deployctl.dev/v1), generated from the profile models.

The spec of an InferenceProfile object is a profile without its apiVersion, kind and metadata, so
its OpenAPI schema is derived here from ``orchestrator.profile.model.Profile``'s JSON schema and can never
drift from it. The API server then refuses at admission what a rule can check without deployctl:
types, ranges, enums, unknown fields, the catalog's GPUs and architectures (in any case) and the
cross-field rules below as CEL (``x-kubernetes-validations``). What needs deployctl itself (the
extraArgs flag tables, the VRAM verdict) is judged when the object is planned.

Pure: models in, a plain dict out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from orchestrator.catalog import lookup as catalog
from orchestrator.policy import model as policy
from orchestrator.profile import model as profiles

GROUP = profiles.CRD_GROUP
VERSION = "v1"
PLURAL = "inferenceprofiles"
SINGULAR = "inferenceprofile"
NAME = f"{PLURAL}.{GROUP}"

# Keywords of JSON Schema that a Kubernetes structural schema does not take (or that pydantic adds
# for documentation only). Defaults are left to deployctl: a default the API server writes into
# every stored object would make an object differ from the file it came from.
_DROPPED = frozenset({"title", "examples", "default", "discriminator"})

# Cross-field rules checked at admission, by the profile path of the object they sit on. Each
# mirrors a pydantic validator of orchestrator/profile/model.py; e2e/test_crd_admission.py runs them on a
# real API server.
_RULES: dict[tuple[str, ...], list[dict[str, str]]] = {
    ("model",): [
        {
            "rule": "has(self.architecture) != has(self.config)",
            "message": "give exactly one of model.architecture (a catalog key) or model.config (a config.json path)",
        }
    ],
    ("model", "source"): [
        {"rule": "has(self.pvc) != has(self.hostPath)", "message": "give exactly one of source.pvc or source.hostPath"}
    ],
    ("engine",): [
        {
            "rule": "(has(self.allowUnpinnedImage) && self.allowUnpinnedImage) || "
            "self.image.matches('@sha256:[0-9a-f]{64}$')",
            "message": "engine.image must be pinned by digest (…@sha256:<64 hex digits>), or set "
            "engine.allowUnpinnedImage: true for development",
        }
    ],
    ("hardware",): [
        {"rule": "has(self.gpu) || has(self.memoryGiB)", "message": "give hardware.gpu or hardware.memoryGiB"}
    ],
    ("monitoring",): [
        {
            "rule": "!has(self.alerts) || !has(self.alerts.enabled) || !self.alerts.enabled || "
            "(has(self.podMonitor) && has(self.podMonitor.enabled) && self.podMonitor.enabled)",
            "message": "monitoring.alerts needs monitoring.podMonitor.enabled: the rules find the release's series "
            "by the labels its PodMonitor puts on them",
        }
    ],
    ("rollout", "canary"): [
        {
            "rule": "self.steps.all(s, has(s.copies) != has(s.percent))",
            "message": "a canary step gives its size as copies or as percent, one of the two",
        },
        {
            "rule": "!has(self.traffic) || self.traffic != 'httpRoute' || "
            "(has(self.httpRoute) && has(self.httpRoute.parentRefs) && size(self.httpRoute.parentRefs) > 0)",
            "message": "rollout.canary traffic httpRoute needs httpRoute.parentRefs, the Gateway the route attaches to",
        },
        {
            "rule": "!has(self.metrics) || !has(self.metrics.source) || self.metrics.source != 'prometheus' || "
            "has(self.metrics.prometheusUrl)",
            "message": "rollout.canary metrics.source prometheus needs metrics.prometheusUrl",
        },
    ],
}


def definition() -> dict[str, object]:
    """The CustomResourceDefinition object, ready to apply."""
    names = {
        "kind": profiles.KIND,
        "listKind": f"{profiles.KIND}List",
        "plural": PLURAL,
        "singular": SINGULAR,
        # Not "ip": that is the short name of networking.k8s.io's IPAddress.
        "shortNames": ["iprofile"],
        "categories": ["deployctl"],
    }
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": _columns(),
        "schema": {"openAPIV3Schema": _object_schema()},
    }
    return _definition(NAME, names, "Namespaced", version)


def _definition(name: str, names: Mapping[str, object], scope: str, version: Mapping[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "deployctl"}},
        "spec": {"group": GROUP, "names": names, "scope": scope, "versions": [version]},
    }


POLICY_PLURAL = policy.PLURAL
POLICY_NAME = f"{POLICY_PLURAL}.{GROUP}"


def policy_definition() -> dict[str, object]:
    """The InferencePolicy CustomResourceDefinition (cluster-scoped), its spec from ``policy.PolicySpec``."""
    raw = policy.PolicySpec.model_json_schema()
    defs: dict[str, object] = raw.pop("$defs", {})
    spec = _structural(_schema(inline_refs(raw, defs)), (policy.KIND,))  # a path no profile rule sits on
    schema = {
        "type": "object",
        "description": "What InferenceProfiles may use, owned by the cluster admin (docs/security.md).",
        "required": ["spec"],  # the admission rules read params.spec
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
    names = {
        "kind": policy.KIND,
        "listKind": f"{policy.KIND}List",
        "plural": POLICY_PLURAL,
        "singular": policy.KIND.lower(),
        "categories": ["deployctl"],
    }
    version = {"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    return _definition(POLICY_NAME, names, "Cluster", version)


def spec_schema() -> dict[str, object]:
    """The OpenAPI schema of an InferenceProfile's spec: the profile's sections, structural."""
    raw = profiles.Profile.model_json_schema()
    defs: dict[str, object] = raw.pop("$defs", {})
    spec = _structural(_schema(inline_refs(raw, defs)), ())
    top = ("apiVersion", "kind", "metadata")
    spec["properties"] = {k: v for k, v in _schema(spec.get("properties")).items() if k not in top}
    required = spec.get("required")
    spec["required"] = [k for k in (required if isinstance(required, list) else []) if k not in top]
    return spec


def _object_schema() -> dict[str, object]:
    return {
        "type": "object",
        "description": "A deployctl profile as a Kubernetes object: the controller plans, applies, gates and "
        "records each new generation of its spec (docs/gitops.md).",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": _status_schema(),
        },
        "x-kubernetes-validations": [
            {
                # The release name names the Deployment, Service and records: a DNS-1123 label.
                "rule": "self.metadata.name.size() <= 63 && "
                "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
                "message": "metadata.name is the release name: at most 63 lowercase letters, digits and '-'",
            }
        ],
    }


def _status_schema() -> dict[str, object]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "type": "object",
        "description": "What the controller last did with this object (kstatus conventions).",
        "properties": {
            "observedGeneration": {"type": "integer"},
            "liveRevision": {
                "type": "integer",
                "nullable": True,
                "description": "The release revision serving now.",
            },
            "liveProfileHash": {"type": "string"},
            "manualRollback": {
                "type": "boolean",
                "description": "The live revision is an on-call `deployctl rollback`; the controller leaves it "
                "until the spec changes.",
            },
            "retry": {
                "type": "string",
                "nullable": True,
                "description": "The deployctl.dev/retry annotation value last acted on.",
            },
            "gate": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "failure": {
                "type": "object",
                "nullable": True,
                "description": "The last generation's failure: its class and message.",
                "properties": {"class": {"type": "string"}, "message": {"type": "string"}},
            },
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def _columns() -> list[dict[str, object]]:
    def condition(kind: str, field: str) -> str:
        return f'.status.conditions[?(@.type=="{kind}")].{field}'

    return [
        {"name": "Ready", "type": "string", "jsonPath": condition("Ready", "status")},
        {"name": "Reason", "type": "string", "jsonPath": condition("Ready", "reason")},
        {"name": "Revision", "type": "integer", "jsonPath": ".status.liveRevision"},
        {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


# --- JSON Schema -> structural OpenAPI ---------------------------------------------------------------


def inline_refs(node: object, defs: Mapping[str, object]) -> object:
    """A JSON Schema with every ``$ref`` into ``defs`` replaced by its target (the field's own keys,
    such as its description, win). Also used by scripts/gen_chart_schema.py."""
    if isinstance(node, list):
        return [inline_refs(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _schema(defs[ref.rsplit("/", 1)[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}  # the field's description wins
        return inline_refs(merged, defs)
    return {key: inline_refs(value, defs) for key, value in node.items()}


def _schema(node: object) -> Mapping[str, object]:
    """``node`` as a schema object; an empty one when it is not a mapping."""
    return node if isinstance(node, Mapping) else {}


def _structural(node: Mapping[str, object], path: tuple[str, ...]) -> dict[str, object]:
    """One JSON Schema node as a structural schema: every node typed, no anyOf/oneOf of types."""
    out = {k: copy.deepcopy(v) for k, v in node.items() if k not in _DROPPED}
    variants = out.pop("anyOf", None)
    if isinstance(variants, list):
        # `X | None`: an optional field. The API server leaves an absent field absent, as pydantic wants.
        (kept,) = [_schema(v) for v in variants if _schema(v).get("type") != "null"]
        out = {**{k: v for k, v in kept.items() if k not in _DROPPED}, **out}
    members = out.pop("oneOf", None)
    if isinstance(members, list):
        # A discriminated union of objects (model.source): all members' fields, one of them required by CEL.
        properties: dict[str, object] = {}
        for member in members:
            properties.update(_schema(_schema(member).get("properties")))
        out = {**out, "type": "object", "properties": properties}
    if "exclusiveMinimum" in out:  # JSON Schema's number becomes OpenAPI 3.0's flag
        out["minimum"], out["exclusiveMinimum"] = out["exclusiveMinimum"], True
    if "exclusiveMaximum" in out:
        out["maximum"], out["exclusiveMaximum"] = out["exclusiveMaximum"], True
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        out["properties"] = {k: _structural(_schema(v), (*path, k)) for k, v in _schema(out.get("properties")).items()}
        extra = out.pop("additionalProperties", None)
        if isinstance(extra, dict):  # a map such as labels or the SLOs
            out["additionalProperties"] = _structural(extra, path)
            out.pop("properties")
    if out.get("type") == "array" and "items" in out:
        out["items"] = _structural(_schema(out["items"]), path)
    rules = copy.deepcopy(_RULES.get(path, [])) + _catalog_rules(path)
    if rules:
        out["x-kubernetes-validations"] = rules
    if _catalog_rules(path):
        out["maxLength"] = _CATALOG_NAME_MAX  # bounds the rule's CEL cost estimate
    if "type" not in out and "enum" not in out:
        raise ValueError(f"profile field {'.'.join(path)} has no single type for a structural schema")
    return out


# Longer than any catalog key; bounds what lowerAscii() may be asked to fold.
_CATALOG_NAME_MAX = 64


def _catalog_rules(path: tuple[str, ...]) -> list[dict[str, str]]:
    """Catalog keys are checked by pydantic validators, in any case (a100-80gb is A100-80GB); at
    admission a CEL rule does the same (an enum could not ignore case)."""
    if path == ("hardware", "gpu"):
        keys, what, hatch = catalog.gpu_keys(), "GPU", "give hardware.memoryGiB and hardware.productLabels instead"
    elif path == ("model", "architecture"):
        keys, what, hatch = catalog.architecture_keys(), "architecture", "give model.config instead"
    else:
        return []
    folded = ", ".join(f"'{k.lower()}'" for k in keys)
    return [
        {
            "rule": f"self.lowerAscii() in [{folded}]",
            "message": f"unknown {what}; known (any case): {', '.join(keys)}; outside the catalog, {hatch}",
        }
    ]
