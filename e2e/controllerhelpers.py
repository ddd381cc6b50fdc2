"""Helpers of the controller e2e tests: InferenceProfile objects written as a GitOps tool writes them,
and their status read back."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes
import yaml
from components import BIN_DIR
from deployhelpers import ReleaseEnv, profile

from orchestrator.controller import crd
from orchestrator.profile import model as profiles


def object_doc(env: ReleaseEnv, **sections: Any) -> dict[str, Any]:
    doc = profile(env.namespace, **sections)
    path = env.tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return profiles.to_object(profiles.load(path))


def apply_object(env: ReleaseEnv, obj: dict[str, Any]) -> None:
    """What Flux or Argo CD does with the object in git: a server-side apply."""
    subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(env.kubeconfig), "apply", "--server-side", "-f", "-"],
        input=yaml.safe_dump(obj),
        text=True,
        check=True,
        capture_output=True,
    )


def get_object(env: ReleaseEnv) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(env.api)
    found: dict[str, Any] = custom.get_namespaced_custom_object(
        crd.GROUP, crd.VERSION, env.namespace, crd.PLURAL, "llm"
    )
    return found


def conditions(env: ReleaseEnv) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (get_object(env).get("status") or {}).get("conditions") or []}


def wait_ready(env: ReleaseEnv, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN_DIR / "kubectl"),
            "--kubeconfig",
            str(env.kubeconfig),
            "wait",
            "inferenceprofile/llm",
            "-n",
            env.namespace,
            "--for=condition=Ready",
            f"--timeout={timeout}s",
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def settled(env: ReleaseEnv, generation: int) -> bool:
    status = get_object(env).get("status") or {}
    reconciling = conditions(env).get("Reconciling", {})
    return status.get("observedGeneration") == generation and reconciling.get("status") == "False"
