"""rollout.canary.traffic httpRoute on the local control plane, with the Gateway API's real HTTPRoute CRD
(standard channel, v1.6.3, from the sigs.k8s.io/gateway-api module build.sh downloads).

The release renders an HTTPRoute to its Service; while a canary step runs, deployctl points the route at
a stable and a canary Service with the step's weights, and gives the route back after. No Gateway
controller runs here (none can be built into this cluster; kwok has no Service data path either), so
what is tested is what deployctl writes and the API server accepts: the route's weights during the
step, the two Services' selectors against the pods' own labels, and the route as it was afterwards.
Live traffic goes straight to the simulators behind the pods, from `deployctl bench` (deployhelpers.Traffic).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import bootstrap
import kubernetes
import pytest
from deployhelpers import (
    GOOD_TTFT_MS,
    MODEL,
    ReleaseEnv,
    Traffic,
    profile,
    read_or_none,
    start_deployctl,
    wait_until,
    write_profile,
)
from test_canary_cluster import MIN_REQUESTS
from test_pod_monitor_cluster import _absent_around, _crd_served

pytestmark = pytest.mark.kwok

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
PORT = 8000  # deployhelpers.profile's engine port: the Service's, and so the route's backends'
NEW_PORT = 8001  # the new revision's (env.forward_8001): its Service's port too


@pytest.fixture
def http_route_crd(api_client: kubernetes.client.ApiClient) -> Iterator[dict[str, Any]]:
    """The HTTPRoute CRD, absent when the test starts and removed after."""
    yield from _absent_around(api_client, bootstrap.http_route_crd())


@pytest.fixture
def routes_served(api_client: kubernetes.client.ApiClient, http_route_crd: dict[str, Any]) -> None:
    kubernetes.utils.create_from_dict(api_client, http_route_crd)
    name = http_route_crd["metadata"]["name"]
    wait_until(lambda: _crd_served(api_client, name), 60, "the HTTPRoute CRD")
    # Established can come a moment before the resource is in discovery, which apply's preflight reads.
    wait_until(lambda: _route_list_works(api_client), 60, "httproutes to be listable")


def _route_list_works(api: kubernetes.client.ApiClient) -> bool:
    try:
        kubernetes.client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    except kubernetes.client.ApiException:
        return False
    return True


def _routed(rollout: dict[str, Any]) -> dict[str, Any]:
    gateway = {"parentRefs": [{"name": "inference-gw", "namespace": "gateways"}], "hostnames": ["llm.example"]}
    return {**rollout, "canary": {**rollout["canary"], "traffic": "httpRoute", "httpRoute": gateway}}


def _canary_rollout() -> dict[str, Any]:
    window = {"window": "20s", "minRequests": MIN_REQUESTS}
    return {"replicas": 2, "canary": {"steps": [{"copies": 1, "analysis": window}], "metrics": {"interval": "5s"}}}


def _route(env: ReleaseEnv) -> dict[str, Any] | None:
    try:
        route: dict[str, Any] = kubernetes.client.CustomObjectsApi(env.api).get_namespaced_custom_object(
            GROUP, VERSION, env.namespace, PLURAL, "llm"
        )
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return route


def _backends(route: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Each backend's name, port and weight (the API server defaults an unset weight to 1)."""
    return [(b["name"], b["port"], b["weight"]) for rule in route["spec"]["rules"] for b in rule["backendRefs"]]


def _service(env: ReleaseEnv, name: str) -> Any:
    return read_or_none(lambda: kubernetes.client.CoreV1Api(env.api).read_namespaced_service(name, env.namespace))


def _watch_while(env: ReleaseEnv, doc: dict[str, Any], seen: Callable[[], None]) -> tuple[int, str]:
    """Run `apply` in the background, calling ``seen`` every 0.2 s until it ends; its exit code and log."""
    log = env.tmp / "apply.log"
    path = write_profile(env.tmp, doc, "canary.yaml")
    running = start_deployctl(env.kubeconfig, "apply", str(path), "--output", "json", log=log)
    deadline = time.monotonic() + 400
    try:
        while running.poll() is None and time.monotonic() < deadline:
            seen()
            time.sleep(0.2)
        code = running.wait(timeout=30)
    except subprocess.TimeoutExpired:
        running.kill()
        raise
    return code, log.read_text()


def test_without_the_gateway_api_the_apply_is_refused_before_any_write(
    env: ReleaseEnv, http_route_crd: dict[str, Any]
) -> None:
    result = env.apply(profile(env.namespace, rollout=_routed(_canary_rollout())))
    assert result.code == 5, result.stdout + result.stderr
    message = result.json["error"] if "error" in result.json else result.json["message"]
    assert "does not serve HTTPRoute (gateway.networking.k8s.io/v1)" in message, message
    assert "Gateway API's standard CRDs" in message and "Nothing was changed" in message, message
    assert env.deployment() is None


def test_a_slower_canary_weighed_on_the_route_fails_and_the_route_gets_its_one_backend_back(
    env: ReleaseEnv, simulator: Callable[..., Any], routes_served: None
) -> None:
    """Step 1 of 1 runs one canary copy of two: the route sends 50 % to the canary's Service, which
    selects the canary's pod, and 50 % to the stable one, which selects the stable pods by their
    ReplicaSet's hash. The canary, ten times slower, fails on live traffic; the route is as revision 1
    applied it and the two Services are gone."""
    slow = simulator(model=MODEL, ttft_ms=GOOD_TTFT_MS * 10)
    env.forward_8001(slow.port)
    rollout = _routed(_canary_rollout())
    first = env.apply(profile(env.namespace, rollout=rollout))
    assert first.code == 0, first.stdout + first.stderr
    at_rest = _route(env)
    assert at_rest is not None and _backends(at_rest) == [("llm", PORT, 1)], at_rest
    assert at_rest["spec"]["parentRefs"][0]["name"] == "inference-gw"
    stable_hashes = {
        p.metadata.labels["pod-template-hash"]
        for p in kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_pod(env.namespace, label_selector="deployctl.dev/release=llm")
        .items
    }

    weights: list[list[tuple[str, int, int]]] = []
    selectors: dict[str, dict[str, str]] = {}

    def seen() -> None:
        route = _route(env)
        if route is not None and _backends(route) not in weights:
            weights.append(_backends(route))
        for side in ("llm-stable", "llm-canary"):
            service = _service(env, side)
            if service is not None:
                selectors[side] = service.spec.selector

    with Traffic([env.good_port, slow.port]) as traffic:
        code, log = _watch_while(env, profile(env.namespace, port=NEW_PORT, rollout=rollout), seen)
    assert code == 6, log
    # Each side on its revision's port: the new revision serves on 8001.
    assert [("llm-stable", PORT, 50), ("llm-canary", NEW_PORT, 50)] in weights, weights
    assert selectors["llm-canary"]["deployctl.dev/track"] == "canary", selectors
    assert {selectors["llm-stable"]["pod-template-hash"]} == stable_hashes, (selectors, stable_hashes)
    assert traffic.failed == 0, traffic
    after = _route(env)
    assert after is not None and _backends(after) == [("llm", PORT, 1)], after
    assert after["spec"] == at_rest["spec"]
    assert _service(env, "llm-stable") is None and _service(env, "llm-canary") is None
    step = env.record(2)["canary"]["steps"][0]
    assert step["weights"] == {"stable": 50, "canary": 50} and step["decision"] == "fail", step


def test_the_first_canary_after_switching_to_a_route_is_spread_by_the_service_and_promoted_with_its_route(
    env: ReleaseEnv, simulator: Callable[..., Any], routes_served: None
) -> None:
    """Revision 1 rendered no route, so there is none to weigh: the canary's traffic is the Service's, which
    the progress says, and the promotion applies revision 2's route, at rest with its one backend."""
    canary_server = simulator(model=MODEL)
    env.forward_8001(canary_server.port)
    first = env.apply(profile(env.namespace, rollout=_canary_rollout()))  # traffic service
    assert first.code == 0, first.stdout + first.stderr
    assert _route(env) is None
    with Traffic([env.good_port, canary_server.port]) as traffic:
        promoted = env.apply(profile(env.namespace, port=NEW_PORT, rollout=_routed(_canary_rollout())), timeout=400)
    assert promoted.code == 0, promoted.stdout + promoted.stderr
    assert promoted.json["result"] == "deployed" and promoted.json["revision"] == 2, promoted.json
    assert "the live revision has no HTTPRoute yet: the Service spreads this canary's traffic" in promoted.stderr
    assert traffic.failed == 0 and traffic.answered > 0, traffic
    (step,) = env.record(2)["canary"]["steps"]
    assert step["decision"] == "pass" and "weights" not in step, step
    route = _route(env)
    assert route is not None and _backends(route) == [("llm", NEW_PORT, 1)], route
    assert _service(env, "llm-stable") is None and _service(env, "llm-canary") is None
