"""engine.compileCache on the real control plane: the wheel's deployctl mounts a ReadWriteMany claim
into every engine pod and points vLLM's caches at the key's directory; an SLO-only revision keeps the
pods (and so the key), a change to what vLLM compiles moves the new pods to a fresh directory.

kwok runs no container, so what the engine writes there is not observed here; that the variables
move vLLM's caches is vLLM's own envs.py (docs/time-to-serving.md#compile-cache), and the bench
measures a start with an empty and a filled cache root on the real vLLM tier.
"""

from __future__ import annotations

from typing import Any

import kubernetes
from deployhelpers import ReleaseEnv, claim_volume, profile, wait_until

CLAIM = "compile-cache"
CACHE_MOUNT = "/var/cache/deployctl-compile"


def _claim(env: ReleaseEnv) -> None:
    """A bound ReadWriteMany claim (kwok has no storage; the scheduler needs it bound)."""
    kubernetes.utils.create_from_yaml(
        env.api, yaml_objects=claim_volume(env.namespace, CLAIM, "ReadWriteMany", "100Gi")
    )
    core = kubernetes.client.CoreV1Api(env.api)
    wait_until(
        lambda: core.read_namespaced_persistent_volume_claim(CLAIM, env.namespace).status.phase == "Bound",
        60,
        "the compile cache claim to be Bound",
    )


def _cached(env: ReleaseEnv, **engine: Any) -> dict[str, Any]:
    return profile(env.namespace, engine={"fsGroup": 1000, "compileCache": {"pvc": CLAIM}, **engine})


def _cache_root(env: ReleaseEnv) -> str:
    """The VLLM_CACHE_ROOT of the release's running pods (one value: they all share the key)."""
    pods = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(env.namespace).items
    live = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
    roots = {e.value for p in live for e in p.spec.containers[0].env or [] if e.name == "VLLM_CACHE_ROOT"}
    claims = {
        v.persistent_volume_claim.claim_name
        for p in live
        for v in p.spec.volumes
        if v.name == "compile-cache" and v.persistent_volume_claim
    }
    assert claims == {CLAIM}, claims
    assert len(roots) == 1, roots
    (root,) = roots
    return str(root)


def test_the_key_holds_across_an_slo_change_and_moves_with_the_compiled_code(env: ReleaseEnv) -> None:
    _claim(env)
    first = env.apply(_cached(env))
    assert first.code == 0, first.stdout + first.stderr
    root = _cache_root(env)
    assert root.startswith(CACHE_MOUNT + "/") and root.endswith("/vllm"), root

    slo_only = _cached(env)
    slo_only["gate"]["smoke"]["slo"] = {**slo_only["gate"]["smoke"]["slo"], "error_rate": "<=0.05"}
    second = env.apply(slo_only, filename="slo.yaml")
    assert second.code == 0, second.stdout + second.stderr
    assert _cache_root(env) == root  # no pod was replaced, and the key is the same

    recompiled = env.apply(_cached(env, maxNumSeqs=16), filename="batch.yaml")
    assert recompiled.code == 0, recompiled.stdout + recompiled.stderr
    wait_until(lambda: _cache_root(env) != root, 60, "the new pods to use a fresh cache directory")


def test_a_claim_without_fs_group_is_refused_before_any_write(env: ReleaseEnv) -> None:
    doc = profile(env.namespace, engine={"compileCache": {"pvc": CLAIM}})
    result = env.apply(doc)
    assert result.code == 2, result.stdout + result.stderr
    assert "engine.compileCache.pvc" in result.stderr and "set engine.fsGroup" in result.stderr, result.stderr
    assert env.deployment() is None
