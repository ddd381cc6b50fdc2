"""Record formats on the real control plane: a release that deployctl 0.1.0 deployed is verified,
upgraded, rolled back to and uninstalled by this deployctl, and a record in a newer format than
this deployctl reads stops every command that would write, with nothing written.

deployctl 0.1.0 runs from its own source (``git archive`` of its commit, on PYTHONPATH, with this
venv's Python and dependencies), so revision 1 is a record 0.1.0 really wrote on this cluster,
not a copy: its namespace is part of what its hash covers, so a golden record could not be moved
into the test's namespace without breaking its chain. docs/record-format.md has the policy.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from deployhelpers import ReleaseEnv, Result, deployctl, profile, write_profile

REPO = Path(__file__).resolve().parent.parent
V010 = "6175418"  # deployctl 0.1.0, the release before record formats
WRITES = 5  # the record format the deployctl under test writes
NEWER = WRITES + 1  # a format no deployctl writes yet
RECORD_LABELS = "deployctl.dev/release-record=true,deployctl.dev/release=llm"


@pytest.fixture(scope="module")
def v010(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deployctl 0.1.0's source tree, from this checkout's git history."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", V010], capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.fail(
            f"deployctl 0.1.0 (git commit {V010}) is not in the git history of {REPO}: "
            f"{archive.stderr.decode(errors='replace').strip()}. This test runs the previous release's own code; "
            "run it from a full clone (git fetch --unshallow)"
        )
    dest = tmp_path_factory.mktemp("deployctl-0.1.0")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def old_deployctl(v010: Path, kubeconfig: Path, *args: str) -> Result:
    """deployctl 0.1.0, run from its source: its ``orchestrator`` comes first on the path (the
    working directory is its tree, so no checkout's package can come before it)."""
    cluster_args = ["--kubeconfig", str(kubeconfig)] if args[0] != "version" else []
    proc = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", *args, *cluster_args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=v010,
        env={**os.environ, "PYTHONPATH": str(v010), "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def new(env: ReleaseEnv, *args: str, timeout: float = 240) -> Result:
    return deployctl(env.kubeconfig, *args, timeout=timeout)


def ok(result: Result) -> Any:
    assert result.code == 0, result.stdout + result.stderr
    return result.json


def records(env: ReleaseEnv) -> dict[str, Any]:
    core = kubernetes.client.CoreV1Api(env.api)
    items = core.list_namespaced_config_map(env.namespace, label_selector=RECORD_LABELS).items
    return {cm.metadata.name: cm for cm in items}


def leases(env: ReleaseEnv) -> dict[str, str]:
    items = kubernetes.client.CoordinationV1Api(env.api).list_namespaced_lease(env.namespace).items
    return {lease.metadata.name: lease.metadata.resource_version for lease in items}


def workload(env: ReleaseEnv) -> tuple[str, int]:
    deployment = env.deployment()
    return deployment.metadata.uid, deployment.metadata.generation


def max_num_seqs(env: ReleaseEnv) -> str:
    container = env.deployment().spec.template.spec.containers[0]
    words = [*(container.command or []), *(container.args or [])]
    return str(words[words.index("--max-num-seqs") + 1])


def plant_newer_format(env: ReleaseEnv, revision: int) -> str:
    """Revision ``revision`` as a future deployctl might write it: format NEWER, with a field this
    deployctl has never heard of, chained onto the newest record."""
    newest = records(env)[f"deployctl.llm.v{revision - 1}"]
    body = json.loads(newest.data["record.json"])
    body |= {"revision": revision, "format": NEWER, "witness": {"alg": "ed25519", "sig": "AAAA"}}
    body["prev_hash"] = newest.metadata.annotations["deployctl.dev/record-sha256"]
    name = f"deployctl.llm.v{revision}"
    labels = {
        **newest.metadata.labels,
        "deployctl.dev/revision": str(revision),
        "deployctl.dev/record-format": str(NEWER),
    }
    kubernetes.client.CoreV1Api(env.api).create_namespaced_config_map(
        env.namespace,
        {
            "metadata": {"name": name, "labels": labels, "annotations": newest.metadata.annotations},
            "immutable": True,
            "data": {"record.json": json.dumps(body)},
            "binaryData": newest.binary_data,
        },
    )
    return name


def test_a_release_deployed_by_0_1_0_is_verified_upgraded_rolled_back_to_and_uninstalled(
    env: ReleaseEnv, v010: Path
) -> None:
    assert old_deployctl(v010, env.kubeconfig, "version").stdout.startswith("deployctl 0.1.0"), "not 0.1.0's code"
    first = write_profile(env.tmp, profile(env.namespace), "first.yaml")
    installed = old_deployctl(v010, env.kubeconfig, "apply", str(first), "--output", "json")
    assert installed.code == 0, installed.stdout + installed.stderr
    cm = records(env)["deployctl.llm.v1"]
    assert "format" not in json.loads(cm.data["record.json"])  # as 0.1.0 writes it
    assert "deployctl.dev/record-format" not in cm.metadata.labels

    assert ok(new(env, "audit", "verify", "llm", "-n", env.namespace, "-o", "json"))["ok"] is True
    assert [(r["revision"], r["format"], r["status"]) for r in env.history()] == [(1, 1, "deployed")]

    upgraded = env.apply(profile(env.namespace, engine={"maxNumSeqs": 16}), filename="second.yaml")
    assert upgraded.code == 0, upgraded.stdout + upgraded.stderr
    assert (
        env.record(2)["format"] == WRITES
        and env.record(2)["prev_hash"] == cm.metadata.annotations["deployctl.dev/record-sha256"]
    )
    assert records(env)["deployctl.llm.v2"].metadata.labels["deployctl.dev/record-format"] == str(WRITES)
    assert max_num_seqs(env) == "16"
    # What 0.1.0 does with a record of a later format (docs/record-format.md): it refuses the whole release, exit 9.
    old_view = old_deployctl(v010, env.kubeconfig, "history", "llm", "-n", env.namespace)
    assert old_view.code == 9 and "deployctl.llm.v2" in old_view.stderr, old_view.stdout + old_view.stderr

    rolled = new(env, "rollback", "llm", "-n", env.namespace, "--to", "1", "--output", "json")
    assert ok(rolled)["rolled_back_to"] == 1
    assert env.record(3)["rollback_of"] == 1 and env.record(3)["format"] == WRITES
    assert max_num_seqs(env) == "32"  # 0.1.0's bytes again
    assert env.status()["live_revision"] == 3
    assert [(r["revision"], r["format"], r["status"]) for r in env.history()] == [
        (1, 1, "superseded"),
        (2, WRITES, "superseded"),
        (3, WRITES, "deployed"),
    ]
    export = ok(new(env, "audit", "export", "llm", "-n", env.namespace, "-o", "json"))
    assert export["format"] == WRITES and [e.get("format") for e in export["records"]] == [None, WRITES, WRITES]
    kept = env.tmp / "export.json"
    kept.write_text(json.dumps(export))
    assert ok(new(env, "audit", "verify", "--file", str(kept), "-o", "json"))["ok"] is True

    gone = new(env, "uninstall", "llm", "-n", env.namespace, "--output", "json")
    assert ok(gone)["revision"] == 4
    assert env.deployment() is None
    assert [(r["revision"], r["status"]) for r in env.history()][-1] == (4, "uninstalled")
    verified = ok(new(env, "audit", "verify", "llm", "-n", env.namespace, "--against", str(kept), "-o", "json"))
    assert verified["ok"] is True and verified["records"] == 4


def test_a_record_in_a_newer_format_stops_apply_rollback_and_uninstall_with_nothing_written(env: ReleaseEnv) -> None:
    assert env.apply(profile(env.namespace)).code == 0
    assert env.apply(profile(env.namespace, engine={"maxNumSeqs": 16}), filename="second.yaml").code == 0
    planted = plant_newer_format(env, 3)
    # The Deployment's generation, not its resourceVersion: kwok's pod status updates may touch its
    # status, while each of these commands would change its spec (or delete it).
    before = (workload(env), sorted(records(env)), leases(env))

    attempts = {
        "apply": env.apply(profile(env.namespace, engine={"maxNumSeqs": 8}), filename="third.yaml"),
        "rollback": new(env, "rollback", "llm", "-n", env.namespace, "--to", "1"),
        "uninstall": new(env, "uninstall", "llm", "-n", env.namespace),
        "history": new(env, "history", "llm", "-n", env.namespace),
    }

    for command, result in attempts.items():
        said = result.stdout + result.stderr
        assert result.code == 9, f"{command}: {said}"
        assert (
            f"release llm revision 3 in namespace {env.namespace} (ConfigMap {planted}) is record format {NEWER}; "
            f"this deployctl 0.3.0 reads formats 1-{WRITES}: upgrade deployctl to a version that reads format {NEWER}"
        ) in " ".join(said.split()), f"{command}: {said}"
        assert "witness" not in said and "Traceback" not in said, f"{command}: {said}"
    after = (workload(env), sorted(records(env)), leases(env))
    assert after == before, "a command wrote to a release that has a newer record"
