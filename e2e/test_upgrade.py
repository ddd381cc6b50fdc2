"""Upgrading deployctl itself, on the local control plane: 0.1.0's install replaced by this one.

0.1.0's CRD and controller objects are its own output (e2e/fixtures/upgrade/v0.1.0, README there
says how they were made), and its controller is its own code, taken from the git history (commit
6175418) and run from source, as the ServiceAccount its RBAC objects grant. It deploys a live
release; then the upgrade goes in the order docs/upgrading.md gives: the CRD, then the controller
(objects, then process), here the deployctl under test. The release must not notice: same
Deployment and pods, same status, no new revision; then the next generation deploys and an on-call
rollback to a revision 0.1.0 wrote works.

The CRD is cluster-scoped, so this test writes the one the rest of the suite uses: it puts the
current one back whatever happens. The ClusterRole and its binding get the test namespace in their
names, so that tests running side by side each have their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faulthelpers
import kubernetes
import pytest
import yaml
from components import BIN_DIR
from controllerhelpers import apply_object, conditions, get_object, object_doc, settled, wait_ready
from deployhelpers import DEPLOYCTL, ReleaseEnv, deployctl, wait_for_settled_namespaces, wait_until

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upgrade" / "v0.1.0"
OLD_COMMIT = "6175418"  # deployctl 0.1.0
CONTROLLER = "deployctl-controller"  # the ServiceAccount, Lease and Deployment both versions render
NEW_IMAGE = "registry.internal/deployctl/controller@sha256:" + "1" * 64
CRD_NAME = "inferenceprofiles.deployctl.dev"
# Short lease and resync, as the `controllers` fixture of conftest.py starts them.
TIMINGS = ("--lease-seconds", "6", "--resync", "2", "--lock-ttl", "10")


def test_an_install_of_0_1_0_upgrades_in_place_keeping_the_release_its_status_and_its_rollback_target(
    crd_installed: None, env: ReleaseEnv, old_code: Path, install: Callable[[str], None], run: _Runner
) -> None:
    # --- 0.1.0: its CRD and controller objects, its controller as their ServiceAccount ----------
    install((FIXTURES / "crd.yaml").read_text())
    install((FIXTURES / "controller.yaml").read_text())
    old = run("old", [sys.executable, "-m", "orchestrator.cli"], pythonpath=old_code)
    apply_object(env, object_doc(env))
    waited = wait_ready(env)
    assert waited.returncode == 0, waited.stderr + run.log("old")
    wait_until(lambda: settled(env, 1), 60, "generation 1 settled")  # its last status write done
    assert get_object(env)["status"]["liveRevision"] == 1
    first = env.record(1)
    assert "format" not in first, "0.1.0 wrote record format 1, which names no format"
    assert first["actor"]["user"] == f"system:serviceaccount:{env.namespace}:{CONTROLLER}", "as its ServiceAccount"
    before = _release(env)
    run.stop(old)

    # --- the upgrade: the CRD, then the controller's objects, then its process -----------------
    crd = deployctl(Path(), "render", "--format", "crd")
    assert crd.code == 0, crd.stderr
    install(crd.stdout)
    rendered = deployctl(
        Path(),
        *("render", "--format", "controller", "--controller-namespace", env.namespace, "--image", NEW_IMAGE),
        *("--watch-namespace", env.namespace),  # the release's namespace, opted in: the controller's writes go there
    )
    assert rendered.code == 0, rendered.stderr
    install(rendered.stdout)
    controller_deployment = kubernetes.client.AppsV1Api(env.api).read_namespaced_deployment(CONTROLLER, env.namespace)
    assert controller_deployment.spec.template.spec.containers[0].image == NEW_IMAGE
    assert controller_deployment.metadata.uid == before["controller uid"], "the controller's Deployment was updated"
    run("new", [DEPLOYCTL])
    wait_until(lambda: "leading as" in run.log("new"), 60, "the new controller leads")
    time.sleep(6)  # three resyncs of the new controller over the object it did not deploy

    after = _release(env)
    assert after == before, "the upgrade left the release, its pods and its status alone"
    assert "leading as" in run.log("new") and "Traceback" not in run.log("new")
    assert [(r["revision"], r["status"]) for r in env.history()] == [(1, "deployed")], "nothing re-deployed"

    # --- the next generation deploys; an on-call rollback reaches back before the upgrade ------
    apply_object(env, object_doc(env, engine={"maxNumSeqs": 16}))
    wait_until(lambda: settled(env, 2) and get_object(env)["status"]["liveRevision"] == 2, 120, "generation 2 live")
    assert conditions(env)["Ready"]["status"] == "True", run.log("new")[-3000:]
    rolled = deployctl(env.kubeconfig, "rollback", "llm", "-n", env.namespace, "--to", "1")
    assert rolled.code == 0, rolled.stdout + rolled.stderr
    wait_until(lambda: get_object(env)["status"].get("manualRollback") is True, 30, "the manual rollback reported")
    ready = conditions(env)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "ManualRollback"), ready
    history = [(r["revision"], r["status"]) for r in env.history()]
    assert history == [(1, "superseded"), (2, "superseded"), (3, "deployed")]
    assert _template(env) == before["template"], "revision 1's pods, as 0.1.0 rendered them, serve again"


def _release(env: ReleaseEnv) -> dict[str, Any]:
    """What an upgrade of the controller must leave as it was: the release's Deployment (the same
    object, not restarted: generation and pod template hash), its pods, and the object's status."""
    apps, core = kubernetes.client.AppsV1Api(env.api), kubernetes.client.CoreV1Api(env.api)
    workload = env.deployment()
    pods = core.list_namespaced_pod(env.namespace, label_selector="app.kubernetes.io/instance=llm").items
    return {
        "uid": workload.metadata.uid,
        "generation": workload.metadata.generation,
        "template": _template(env),
        "template hashes": sorted({p.metadata.labels.get("pod-template-hash") for p in pods}),
        "pods": sorted(p.metadata.uid for p in pods),
        "status": get_object(env)["status"],
        "controller uid": apps.read_namespaced_deployment(CONTROLLER, env.namespace).metadata.uid,
    }


def _template(env: ReleaseEnv) -> Any:
    return env.api.sanitize_for_serialization(env.deployment().spec.template)


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def old_code(tmp_path: Path) -> Path:
    """deployctl 0.1.0's source (its package and templates) from this clone's history."""
    has = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"], capture_output=True, check=False
    )
    if has.returncode != 0:
        pytest.fail(
            f"the upgrade test runs deployctl 0.1.0 from commit {OLD_COMMIT}, which {ROOT} does not have "
            "(a shallow clone?): fetch the history (git fetch --unshallow) and run it again"
        )
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", OLD_COMMIT, "orchestrator", "manifests"], capture_output=True, check=True
    )
    target = tmp_path / "v0.1.0"
    target.mkdir()
    archive_path = tmp_path / "v0.1.0.tar"
    archive_path.write_bytes(archive.stdout)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    version = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--version"],
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=target,
        capture_output=True,
        text=True,
        check=False,
    )
    assert version.stdout.strip() == "deployctl, version 0.1.0", version.stdout + version.stderr
    return target


@pytest.fixture
def install(env: ReleaseEnv) -> Iterator[Callable[[str], None]]:
    """Server-side apply a rendered install (CRD or controller objects) the way an operator does,
    its controller objects moved into the test's namespace; afterwards, the suite's CRD back and
    the cluster-scoped RBAC gone."""
    cluster_role = f"{CONTROLLER}-{env.namespace}"[:253]

    def apply(text: str) -> None:
        docs = [_retarget(doc, env.namespace, cluster_role) for doc in yaml.safe_load_all(text) if doc]
        _kubectl(env.kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
        if any(doc["kind"] == "CustomResourceDefinition" for doc in docs):
            _kubectl(env.kubeconfig, "wait", f"crd/{CRD_NAME}", "--for=condition=Established", "--timeout=30s")

    yield apply
    current = deployctl(Path(), "render", "--format", "crd")
    _kubectl(env.kubeconfig, "apply", "--server-side", "-f", "-", stdin=current.stdout)
    rbac = kubernetes.client.RbacAuthorizationV1Api(env.api)
    for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
        try:
            delete(cluster_role)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise


def _retarget(doc: dict[str, Any], namespace: str, cluster_role: str) -> dict[str, Any]:
    """The controller's objects in ``namespace`` (the Namespace object becomes the test's own), its
    ClusterRole and binding named ``cluster_role``; other objects as they are."""
    meta = doc["metadata"]
    if doc["kind"] == "Namespace":
        meta["name"] = namespace
    elif doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        meta["name"] = cluster_role
    elif "namespace" in meta:
        meta["namespace"] = namespace
    if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
        if doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] = cluster_role
        for subject in doc["subjects"]:
            subject["namespace"] = namespace
    return doc


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> None:
    done = subprocess.run(
        [str(BIN_DIR / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"


class _Runner:
    """`deployctl controller -n NS` processes (any version's), as the controller's ServiceAccount."""

    def __init__(self, env: ReleaseEnv) -> None:
        self.env = env
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(self, name: str, command: list[str], pythonpath: Path | None = None) -> subprocess.Popen[bytes]:
        token = faulthelpers.mint_token(self.env.api, self.env.namespace, CONTROLLER)
        kubeconfig = faulthelpers.kubeconfig_with(self.env.kubeconfig, self.env.tmp / f"{name}.kubeconfig", token=token)
        environ = dict(os.environ)
        if pythonpath is not None:
            environ["PYTHONPATH"] = str(pythonpath)  # ahead of the installed deployctl on sys.path
        argv = [*command, "controller", "-n", self.env.namespace, "--kubeconfig", str(kubeconfig), *TIMINGS]
        with (self.env.tmp / f"controller-{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environ,
                cwd=pythonpath or self.env.tmp,
            )
        self.started.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.env.tmp / f"controller-{name}.log").read_text()

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def run(env: ReleaseEnv) -> Iterator[_Runner]:
    wait_for_settled_namespaces(env.api)  # the controller's gate judges latency
    runner = _Runner(env)
    yield runner
    if any(proc.poll() is None for proc in runner.started):
        # As the `controllers` fixture: the objects go while a controller can still remove its finalizer.
        delete = ("delete", "inferenceprofiles", "--all", "-n", env.namespace, "--wait", "--timeout=60s")
        subprocess.run(
            [str(BIN_DIR / "kubectl"), "--kubeconfig", str(env.kubeconfig), *delete], capture_output=True, check=False
        )
    for proc in runner.started:
        runner.stop(proc)
