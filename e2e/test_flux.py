"""GitOps proven with a real Flux: source-controller and kustomize-controller on the local control plane.

git is a bare repository served by `git http-backend` on loopback; Flux clones it and applies what
the commit holds. In the controller mode the commit holds an InferenceProfile object, `deployctl
controller` deploys and gates it, and Flux's health check (a Kustomization with `wait: true`, which
reads the object's kstatus conditions) says whether the commit is healthy. In the render mode the
commit holds the rendered manifests and `deployctl gate` judges what Flux applied.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from controllerhelpers import conditions, get_object, object_doc
from deployhelpers import ReleaseEnv, deployctl, profile, wait_until, write_profile
from fluxhelpers import GitServer, create_git_repository, create_kustomization, wait_ready

REPO = "inference"
ROOT = Path(__file__).resolve().parent.parent
# The health check deployctl ships for Flux: what users put in their Kustomization.
HEALTH_EXPRS = yaml.safe_load((ROOT / "gitops" / "flux" / "inferenceprofile-health.yaml").read_text())
GOOD_IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "4f1c7b0d" * 8
NEW_IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "9a8b7c6d" * 8


@dataclass
class GitOps:
    env: ReleaseEnv
    git: GitServer

    def commit(self, files: dict[str, str | None], message: str) -> str:
        return self.git.commit(REPO, files, message)

    def sync(self, *, wait: bool = True, timeout: str = "150s", spec: dict[str, Any] | None = None) -> None:
        """The GitRepository and a Kustomization named llm applying the repository to the test's namespace,
        with deployctl's health check for InferenceProfile objects."""
        ns = self.env.namespace
        spec = {"healthCheckExprs": HEALTH_EXPRS, **(spec or {})}
        create_git_repository(self.env.api, ns, REPO, self.git.url(REPO))
        create_kustomization(
            self.env.api, ns, "llm", source=REPO, target_namespace=ns, timeout=timeout, wait=wait, spec=spec
        )


@pytest.fixture
def gitops(flux: None, crd_installed: None, env: ReleaseEnv, tmp_path: Path) -> Iterator[GitOps]:
    with GitServer(tmp_path / "git") as git:
        git.create_repo(REPO)
        yield GitOps(env, git)


def _object_file(env: ReleaseEnv, **sections: Any) -> dict[str, str | None]:
    obj = object_doc(env, **sections)
    obj["metadata"].pop("namespace")  # the Kustomization's targetNamespace places it
    return {"kustomization.yaml": "resources: [llm.yaml]\n", "llm.yaml": yaml.safe_dump(obj)}


def test_a_committed_profile_object_is_deployed_by_the_controller_and_flux_reports_it_healthy(
    gitops: GitOps, controllers: Callable[..., Any]
) -> None:
    env = gitops.env
    controllers()
    sha = gitops.commit(_object_file(env), "llama: first revision")
    gitops.sync()
    ready = wait_ready(env.api, env.namespace, "llm", revision=sha, timeout_s=240)
    assert ready.status == "True", ready
    assert conditions(env)["Ready"]["status"] == "True" and get_object(env)["status"]["liveRevision"] == 1
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")]


def test_a_commit_that_misses_its_slo_is_unhealthy_in_flux_while_the_last_good_revision_serves_then_a_fix_heals(
    gitops: GitOps, controllers: Callable[..., Any], simulator: Callable[..., Any]
) -> None:
    env = gitops.env
    controllers()
    first = gitops.commit(_object_file(env), "first revision")
    gitops.sync(timeout="90s")
    assert wait_ready(env.api, env.namespace, "llm", revision=first, timeout_s=240).status == "True"

    slow = simulator(model="sim-model", ttft_ms=900, itl_ms=5)  # the new image's p95 TTFT misses "<=500"
    env.forward_8001(slow.port)
    bad = gitops.commit(_object_file(env, engine={"image": NEW_IMAGE, "port": 8001}), "new vLLM image")
    unhealthy = wait_ready(env.api, env.namespace, "llm", status="False", revision=bad, timeout_s=300)
    assert unhealthy.reason == "HealthCheckFailed", unhealthy
    assert "InferenceProfile" in unhealthy.message
    ready = conditions(env)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "slo_failed"
    container = env.deployment().spec.template.spec.containers[0]
    assert container.image == GOOD_IMAGE and container.ports[0].container_port == 8000, "the last good one serves"
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "superseded"), (2, "failed"), (3, "deployed")]

    fixed = gitops.commit(_object_file(env, engine={"image": NEW_IMAGE}), "new image, served on the right port")
    healed = wait_ready(env.api, env.namespace, "llm", revision=fixed, timeout_s=300)
    assert healed.status == "True", healed
    assert conditions(env)["Ready"]["status"] == "True"
    assert env.deployment().spec.template.spec.containers[0].image == NEW_IMAGE
    assert [r["status"] for r in env.history()][-1] == "deployed" and len(env.history()) == 4


def test_a_controller_killed_mid_apply_under_flux_is_replaced_and_converges_without_a_duplicate_revision(
    gitops: GitOps, controllers: Callable[..., Any]
) -> None:
    env = gitops.env
    first = controllers("a")
    wait_until(lambda: "leading as" in (env.tmp / "controller-a.log").read_text(), 30, "controller a leads")
    controllers("b")
    slow = _object_file(env, placement={"podAnnotations": {"sim.deployctl.dev/ready-delay": "8s"}})
    sha = gitops.commit(slow, "slow to load")
    gitops.sync()
    wait_until(lambda: env.deployment() is not None, 90, "controller a applied the Deployment")
    first.send_signal(signal.SIGKILL)
    first.wait()
    ready = wait_ready(env.api, env.namespace, "llm", revision=sha, timeout_s=240)
    assert ready.status == "True", (env.tmp / "controller-b.log").read_text()[-3000:]
    assert "leading as" in (env.tmp / "controller-b.log").read_text()
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")], "no duplicate revision"


def test_the_render_mode_runs_under_flux_a_health_checked_kustomization_then_the_gate(gitops: GitOps) -> None:
    env = gitops.env
    path = write_profile(env.tmp, profile(env.namespace))
    rendered = env.tmp / "rendered"
    assert deployctl(Path(), "render", str(path), "--output-dir", str(rendered)).code == 0
    files: dict[str, str | None] = {p.name: p.read_text() for p in sorted(rendered.glob("*.yaml"))}
    files["kustomization.yaml"] = yaml.safe_dump({"resources": sorted(files)})
    sha = gitops.commit(files, "rendered manifests of llm")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "namespace": env.namespace}
    gitops.sync(spec={"healthChecks": [deployment]})
    ready = wait_ready(env.api, env.namespace, "llm", revision=sha, timeout_s=180)
    assert ready.status == "True", ready
    # What the gate Job runs after the Kustomization is healthy (docs/gitops.md):
    gated = deployctl(env.kubeconfig, "gate", str(path), "--output", "json", timeout=240)
    assert gated.code == 0, gated.stdout + gated.stderr
    assert gated.json["result"] == "deployed" and gated.json["gate"]["verdict"] == "pass"
    rows = env.history()
    assert [(r["revision"], r["status"]) for r in rows] == [(1, "deployed")]
    assert rows[0]["description"].startswith("gitops sync gated")
