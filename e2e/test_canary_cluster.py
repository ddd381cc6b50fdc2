"""rollout.canary on the local control plane, as far as this deployctl runs it: preflight places the
canary (beside the stable copies when the kwok GPU nodes have room), `apply --dry-run` says so, and a
real apply refuses, before any write, a canary it would not run."""

from __future__ import annotations

from deployhelpers import ReleaseEnv, profile


def test_preflight_places_the_canary_beside_and_apply_refuses_to_ignore_it(env: ReleaseEnv) -> None:
    first = env.apply(profile(env.namespace, rollout={"replicas": 2}))
    assert first.code == 0, first.stdout + first.stderr
    before = env.deployment()

    canary = {"replicas": 2, "canary": {"steps": [{"copies": 1, "analysis": {"window": "1m"}}]}}
    changed = profile(env.namespace, rollout=canary, engine={"maxNumSeqs": 16})  # a new pod template
    planned = env.apply(changed, "--dry-run")
    assert planned.code == 0, planned.stdout + planned.stderr
    assert "its canary beside the stable copies" in planned.json["message"], planned.json

    refused = env.apply(changed)
    assert refused.code == 5, refused.stdout + refused.stderr
    assert refused.json["result"] == "refused"
    message = refused.json["message"]
    assert "does not run canary steps yet" in message and "Nothing was written" in message, message
    assert "Traceback" not in refused.stderr
    after = env.deployment()
    assert after.metadata.generation == before.metadata.generation, "the refused apply changed the Deployment"
    assert [r["revision"] for r in env.history()] == [1], "the refusal wrote no record"
