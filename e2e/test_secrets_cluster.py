"""Secrets stay secret on the real control plane: `$(VAR)` in the profile, and a server that echoes a token.

Kubernetes expands ``$(NAME)`` in a container's command and args to the value of the env variable
NAME; with ``model.credentialsSecret`` the pod's HF_TOKEN is a Secret's value. kwok runs no
container, so the kubelet's expansion is done here (:func:`kubelet_expand`, the rule of
k8s.io/kubernetes third_party/forked/golang/expansion) on the args the API server stored in the
pod that the ReplicaSet controller created, and the simulator is started with what the container
would receive: it echoes that name on /v1/models, which the health gate checks.

The planted value is shaped like a Hugging Face token (``hf_…``), as a real HF_TOKEN is. Every place
it could land is searched: the CLI's output, the release records (record.json and the manifests),
the InferenceProfile's status and the namespace's events.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
import pytest
import yaml
from controllerhelpers import apply_object, conditions, get_object, object_doc, settled
from deployhelpers import ReleaseEnv, deployctl, profile, wait_until, write_profile

pytestmark = pytest.mark.kwok

NAME_WITH_REF = "sim-$(HF_TOKEN)"


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """What the container receives for one command or args string: ``$$`` → ``$``, ``$(NAME)`` →
    NAME's value when the container defines it (else kept as written), any other ``$`` kept."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "(" and (close := text.find(")", i + 2)) >= 0:
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append(text[i : i + 2])
            i += 2
    return "".join(out)


def _plant(env: ReleaseEnv) -> str:
    planted = "hf_" + secrets.token_urlsafe(24)
    kubernetes.client.CoreV1Api(env.api).create_namespaced_secret(
        env.namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": planted}}
    )
    return planted


def _served_name(args: list[str]) -> str:
    return args[args.index("--served-model-name") + 1]


def _container_env(api: Any, namespace: str, container: Any) -> dict[str, str]:
    """The container's env as the kubelet resolves it: plain values and Secret keys."""
    core = kubernetes.client.CoreV1Api(api)
    resolved: dict[str, str] = {}
    for var in container.env or []:
        if var.value is not None:
            resolved[var.name] = kubelet_expand(var.value, resolved)
        elif var.value_from is not None and var.value_from.secret_key_ref is not None:
            ref = var.value_from.secret_key_ref
            secret = core.read_namespaced_secret(ref.name, namespace)
            resolved[var.name] = base64.b64decode(secret.data[ref.key]).decode()
    return resolved


def _records(env: ReleaseEnv) -> str:
    items = (
        kubernetes.client.CoreV1Api(env.api)
        .list_namespaced_config_map(env.namespace, label_selector="deployctl.dev/release-record=true")
        .items
    )
    parts = []
    for cm in items:
        parts += [json.dumps(cm.metadata.annotations or {}), *(cm.data or {}).values()]
        parts += [gzip.decompress(base64.b64decode(v)).decode() for v in (cm.binary_data or {}).values()]
    return "\n".join(parts)


def _events(env: ReleaseEnv) -> str:
    events = kubernetes.client.CoreV1Api(env.api).list_namespaced_event(env.namespace).items
    return "\n".join(f"{e.reason} {e.message}" for e in events)


def _assert_nowhere(planted: str, places: Mapping[str, str]) -> None:
    for needle in (planted, base64.b64encode(planted.encode()).decode(), planted[3:15]):
        for where, text in places.items():
            assert needle not in text, f"the Secret's value (or part of it) is in the {where}"


def test_a_variable_reference_in_the_model_name_reaches_the_server_unexpanded(
    env: ReleaseEnv, simulator: Callable[..., Any]
) -> None:
    planted = _plant(env)
    doc = profile(env.namespace, model={"name": NAME_WITH_REF, "credentialsSecret": "hf-token"}, engine={"port": 8001})
    path = write_profile(env.tmp, doc, "ref.yaml")
    rendered = deployctl(env.kubeconfig, "render", str(path))
    assert rendered.code == 0, rendered.stderr
    deployment = next(o for o in yaml.safe_load_all(rendered.stdout) if o and o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _served_name(args) == "sim-$$(HF_TOKEN)"
    # The server the container would run: started with the served name the kubelet would hand it.
    received = kubelet_expand(_served_name(args), {"HF_TOKEN": planted})
    served = simulator(model=received)
    env.forward_8001(served.port)

    applied = env.apply(doc)
    assert applied.code == 0, applied.stderr  # the gate found the name as the profile wrote it

    # The pod the ReplicaSet controller made, as the API server stores it, and what its container receives.
    pods = kubernetes.client.CoreV1Api(env.api).list_namespaced_pod(
        env.namespace, label_selector="app.kubernetes.io/instance=llm"
    )
    assert pods.items
    for pod in pods.items:
        container = pod.spec.containers[0]
        assert container.args == args, "the API server changed the args"
        values = _container_env(env.api, env.namespace, container)
        assert values["HF_TOKEN"] == planted  # the variable is there to be expanded
        assert kubelet_expand(_served_name(container.args), values) == NAME_WITH_REF
    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/v1/models", timeout=10) as answer:
        assert [m["id"] for m in json.load(answer)["data"]] == [NAME_WITH_REF]  # the simulator's echo

    history = deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace)
    status = deployctl(env.kubeconfig, "status", "llm", "-n", env.namespace, "--output", "yaml")
    _assert_nowhere(
        planted,
        {
            "output": applied.stdout + applied.stderr + history.stdout + status.stdout + rendered.stdout,
            "records": _records(env),
            "events": _events(env),
        },
    )


def test_a_server_whose_model_name_holds_the_token_never_puts_it_in_records_status_or_events(
    crd_installed: None, env: ReleaseEnv, simulator: Callable[..., Any], controllers: Callable[..., Any]
) -> None:
    """What an unescaped `$(HF_TOKEN)` did, or what a hostile server does: it serves a name holding the
    token. The health gate fails, and its message (in the record, the status and the events) says
    which names the server lists: redacted, short, one line."""
    planted = _plant(env)
    hostile = simulator(model=f"sim-{planted}")
    env.forward_8001(hostile.port)
    controllers()
    apply_object(
        env, object_doc(env, model={"name": NAME_WITH_REF, "credentialsSecret": "hf-token"}, engine={"port": 8001})
    )
    wait_until(lambda: settled(env, 1), 180, "generation 1 judged")
    conds = conditions(env)
    assert conds["Ready"]["status"] == "False", conds
    status = get_object(env).get("status") or {}
    failure = status.get("failure") or {}
    assert failure.get("class") == "health", status
    assert "/v1/models lists" in failure.get("message", "") and "[redacted]" in failure["message"], failure
    _assert_nowhere(
        planted,
        {
            "status": json.dumps(status),
            "records": _records(env),
            "events": _events(env),
            "controller log": (env.tmp / "controller-a.log").read_text(errors="replace"),
        },
    )
