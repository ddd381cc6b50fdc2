"""Write the golden release records of the record format of the deployctl on PYTHONPATH.

    PYTHONPATH=/tmp/v010 .venv/bin/python scripts/gen_record_fixtures.py tests/data/records  # 0.1.0: format 1
    .venv/bin/python scripts/gen_record_fixtures.py tests/data/records                         # this one

Builds the history of profiles/prod-tp4.yaml's release through that deployctl's own code (planner,
render, writer.append, audit.export) against an in-memory store, no cluster: 1 install,
2 upgrade (with a start-up observation), 3 a new image that failed its gate, 4 the automatic
rollback to 2, 5 uninstall. Writes each record's ConfigMap and the audit export into
DIR/format-N/ (N: the format that deployctl writes), replacing what was there. Time and actor are
fixed, so a rerun with the same code writes the same bytes (Ed25519 signatures are deterministic).
From format 3 the records are signed with the TEST key tests/data/keys/TEST-ONLY-signing-key.pem,
which is public and must never sign a real release. tests/data/records/README.md says when to run it.
"""

from __future__ import annotations

import copy
import datetime
import json
import pathlib
import sys
from typing import Any

from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.records import audit, releases, writer
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILE = ROOT / "profiles" / "prod-tp4.yaml"
TEST_KEY = ROOT / "tests" / "data" / "keys" / "TEST-ONLY-signing-key.pem"
START = datetime.datetime(2025, 1, 6, 9, 0, 0, tzinfo=datetime.timezone.utc)
ACTOR = {"user": "system:serviceaccount:ci:deployctl", "ci": {"CI": "true", "GITHUB_RUN_ID": "4242"}}


class Store:
    """The three verbs ``writer.append`` uses, over a dict (as tests/test_releases.py's FakeKube)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(name))

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        wanted = dict(term.split("=", 1) for term in (labels or "").split(",") if term)
        found = [o for o in self.objects.values() if wanted.items() <= o["metadata"]["labels"].items()]
        return copy.deepcopy(found), "1"

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj


def revision_of(text: str) -> dict[str, Any]:
    """What a Draft holds for this profile text: its plan, rendered manifests and identity."""
    profile = profiles.loads(text, source=str(PROFILE))
    plan = planner.check(profile)
    manifests = render.to_yaml(render.render(profile, plan)).encode()
    return {
        "manifests": manifests,
        "profile_text": text,
        "plan": plan.to_json(),
        "model": releases.ModelRef(name=profile.model.name, revision=profile.model.revision),
        "image": profile.engine.image,
        "profile_hash": profile.spec_hash(),
    }


def signed() -> dict[str, Any]:
    """``signer=`` for a writer.Draft, from the format that signs records on (none before)."""
    if not hasattr(releases, "SIGNATURE_KEY"):
        return {}
    from orchestrator.records import signing

    return {"signer": signing.load_signer(str(TEST_KEY))}


def serving() -> dict[str, Any]:
    """``time_to_serving=`` for the upgrade's record, from the format that has it on (none before)."""
    try:
        from orchestrator.apply import time_to_serving
    except ImportError:
        return {}
    pod = time_to_serving.PodStart(
        "llama3-70b-7d9f8c6b5-x2x7q",
        "gpu-node-3",
        {"scheduling": 1.0, "image_pull": 0.0, "container_start": 2.0, "engine_start": 214.0},
        {"weights_read": 181.2, "model_load": 187.4, "compile": 10.8, "cuda_graphs": 3.0, "engine_init": 21.5},
    )
    stored = time_to_serving.TimeToServing({"rollout": 219.4, "health": 1.3, "first_token": 0.2}, (pod,))
    return {"time_to_serving": stored.to_json()}


def canary() -> dict[str, Any]:
    """``canary=`` for the upgrade's draft, from the format that has it on (none before): its canary
    passed step 1 on live traffic and was promoted."""
    if "canary" not in getattr(writer.Draft, "__dataclass_fields__", {}):
        return {}
    side = {"requests": 212.0, "p95_ttft_ms": 650.0, "error_rate": 0.0}
    analysis = {
        "verdict": "pass",
        "reason": "3 checks held over 300 s of live traffic",
        "window_s": 300.0,
        "canary_share": 0.25,
        "canary": {"pods": ["llama3-70b-canary-5c8d7-q2w4e"], **side},
        "stable": {"pods": ["llama3-70b-7d9f8c6b5-x2x7q"], **side, "requests": 636.0, "p95_ttft_ms": 620.0},
        "checks": [
            {
                "metric": "p95_ttft_ms",
                "canary": 650.0,
                "limit": 744.0,
                "source": "ratio 1.2 to stable 620.0",
                "passed": True,
            },
            {"metric": "error_rate", "canary": 0.0, "limit": 0.02, "source": "ratio 2 to stable 0.01", "passed": True},
            {"metric": "p95_ttft_ms", "canary": 650.0, "limit": 1500.0, "source": "slo <=1500", "passed": True},
        ],
    }
    step = {"step": 1, "copies": 1, "of": 4, "gate": "pass", "windows": 1, "decision": "pass", "analysis": analysis}
    return {"canary": {"mode": "beside", "traffic": "service", "source": "pods", "steps": [step], "result": "passed"}}


def build(store: Store) -> list[releases.Record]:
    base = PROFILE.read_text()
    install = revision_of(base)
    upgrade = revision_of(base.replace("maxNumSeqs: 64", "maxNumSeqs: 48"))
    bad_image = revision_of(base.replace("@sha256:4f1c7b0d", "@sha256:0bad0bad"))
    name, namespace = "llama3-70b", "inference"

    def append(step: int, what: dict[str, Any], outcome: releases.Outcome, **fields: Any) -> releases.Record:
        now = START + datetime.timedelta(minutes=10 * step)
        draft = writer.Draft(name, namespace, actor=ACTOR, **what, **signed(), **(canary() if step == 1 else {}))
        return writer.append(store, writer.NewRecord(draft, outcome, **fields), now=now)

    observed = [{"pod": "llama3-70b-7d9f8c6b5-x2x7q", "kv_cache_tokens": 412_320, "load_seconds": 187.4}]
    failed_gate = {"verdict": "fail", "metrics": {"p95_ttft_ms": 2100.0}, "failed": ["p95_ttft_ms 2100 > 1500"]}
    append(0, install, "deployed", description="install")
    second = append(1, upgrade, "deployed", description="upgrade", observed=observed, **serving())
    append(
        2,
        bad_image,
        "failed",
        description="upgrade (failed)",
        gate=failed_gate,
        failure={"class": "gate_failed", "message": "p95_ttft_ms 2100 > 1500"},
    )
    restored = {k: v for k, v in upgrade.items() if k != "profile_text"} | {"profile_text": second.profile}
    append(3, restored, "deployed", description="rollback to 2 after upgrade failed", rollback_of=2)
    append(
        4,
        restored,
        "uninstalled",
        description="uninstall",
        deleted=["Deployment/llama3-70b", "Service/llama3-70b", "ServiceAccount/llama3-70b"],
    )
    return releases.load_history(store, name, namespace)


def main(target: pathlib.Path) -> None:
    store = Store()
    history = build(store)
    fmt = getattr(releases, "RECORD_FORMAT", 1)  # 0.1.0 names no format
    out = target / f"format-{fmt}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    for record in history:
        cm = store.objects[releases.record_name(record.release, record.revision)]
        (out / f"{cm['metadata']['name']}.json").write_text(json.dumps(cm, indent=2, sort_keys=True) + "\n")
    when = START + datetime.timedelta(hours=1)
    doc = audit.export(history, release=history[0].release, namespace=history[0].namespace, now=when)
    (out / "export.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(history)} records and export.json of format {fmt} into {out}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "records")
