"""The Helm chart as users install it: the .tgz that `helm package` makes, installed by the real helm.

GitOps users who take the chart instead of `deployctl render` install the package with the values
that `deployctl render --format helm-values` resolves, then gate what helm applied with `deployctl
gate` (docs/gitops.md). Here that runs on the local control plane: helm v3 built from its Go module,
the kwok GPU nodes, the simulator behind the pods, and the wheel's deployctl.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import components
import pytest
import yaml
from deployhelpers import ReleaseEnv, deployctl, profile, wait_until, write_profile

ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = ROOT / "charts" / "vllm-inference"
HELM = components.BIN_DIR / "helm"


def helm(env: ReleaseEnv, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), "--kubeconfig", str(env.kubeconfig), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def chart_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: `make build` builds it")
    out = tmp_path_factory.mktemp("chart")
    done = subprocess.run(
        [str(HELM), "package", str(CHART_DIR), "--destination", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    (tgz,) = out.glob("vllm-inference-*.tgz")
    return tgz


def test_the_packaged_chart_installs_with_deployctls_values_and_passes_the_gate(
    env: ReleaseEnv, chart_package: Path
) -> None:
    path = write_profile(env.tmp, profile(env.namespace))
    values = deployctl(Path(), "render", str(path), "--format", "helm-values")
    assert values.code == 0, values.stderr
    values_file = env.tmp / "values.yaml"
    values_file.write_text(values.stdout)

    installed = helm(
        env, "install", "llm", chart_package, "-n", env.namespace, "-f", values_file, "--wait", "--timeout", "150s"
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = helm(env, "list", "-n", env.namespace, "-o", "yaml")
    (release,) = yaml.safe_load(listed.stdout)
    assert release["chart"] == chart_package.name.removesuffix(".tgz") and release["status"] == "deployed"

    # What the GitOps gate step runs once helm (or Argo CD, or Flux's helm-controller) has applied.
    gated = deployctl(env.kubeconfig, "gate", str(path), "--output", "json", timeout=240)
    assert gated.code == 0, gated.stdout + gated.stderr
    assert gated.json["result"] == "deployed" and gated.json["gate"]["verdict"] == "pass"
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")]

    # helm owns what it installed: an uninstall removes the Deployment, and deployctl's record stays.
    assert helm(env, "uninstall", "llm", "-n", env.namespace, "--wait").returncode == 0
    wait_until(lambda: not _deployments(env), 60, "the chart's Deployment to go")
    assert [r["revision"] for r in env.history()] == [1]


def _deployments(env: ReleaseEnv) -> list[str]:
    import kubernetes

    apps = kubernetes.client.AppsV1Api(env.api)
    return [d.metadata.name for d in apps.list_namespaced_deployment(env.namespace).items]
