"""The GitOps harness keeps its promises: Flux's real controllers apply what is committed to a
git server on loopback, follow new commits, prune, and report a broken revision.

These run first when something is off with Flux in e2e/cluster: the GitOps tests take for
granted that a commit reaches the cluster as checked here.
"""

from __future__ import annotations

import subprocess
from typing import Any

import fluxhelpers
import kubernetes
import pytest
import yaml
from deployhelpers import exists, wait_until


def configmap(name: str, **data: str) -> str:
    # No namespace: the Kustomization's targetNamespace sets it.
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def kustomization_yaml(*resources: str) -> str:
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": list(resources)}
    return yaml.safe_dump(doc)


def read_configmap(api_client: kubernetes.client.ApiClient, namespace: str, name: str) -> Any:
    return kubernetes.client.CoreV1Api(api_client).read_namespaced_config_map(name, namespace)


def test_git_server_serves_commits(git_server: fluxhelpers.GitServer) -> None:
    url = git_server.create_repo("plain")
    assert git_server.head("plain") is None
    first = git_server.commit("plain", {"a.txt": "one\n", "dir/b.txt": "b\n"}, "first")
    second = git_server.commit("plain", {"a.txt": "two\n", "dir/b.txt": None}, "second")
    assert git_server.head("plain") == second != first

    listed = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, check=False)
    # Say why when it fails: a CI run once saw exit 128 here with nothing else to go on.
    assert listed.returncode == 0, f"git ls-remote {url}: {listed.stderr[-1500:]}; served {git_server.requests}"
    assert f"{second}\trefs/heads/main" in listed.stdout
    tree = subprocess.run(
        ["git", "--git-dir", str(git_server.repo_path("plain")), "ls-tree", "-r", "--name-only", second],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tree == ["a.txt"]  # dir/b.txt deleted; a.txt kept with new content


@pytest.mark.usefixtures("flux")
def test_flux_applies_a_commit_and_follows_the_next(
    git_server: fluxhelpers.GitServer, namespace: str, api_client: kubernetes.client.ApiClient
) -> None:
    url = git_server.create_repo("app")
    first = git_server.commit(
        "app",
        {"kustomization.yaml": kustomization_yaml("settings.yaml"), "settings.yaml": configmap("settings", mode="a")},
        "settings: mode a",
    )
    fluxhelpers.create_git_repository(api_client, namespace, "app", url)
    fluxhelpers.create_kustomization(api_client, namespace, "app", source="app", target_namespace=namespace)

    ready = fluxhelpers.wait_ready(api_client, namespace, "app", revision=first)
    assert (ready.status, ready.reason) == ("True", "ReconciliationSucceeded"), ready
    assert ready.revision == f"main@sha1:{first}"
    cm = read_configmap(api_client, namespace, "settings")
    assert cm.data == {"mode": "a"}
    # Owned by the Kustomization, by the labels Flux prunes with.
    assert cm.metadata.labels["kustomize.toolkit.fluxcd.io/name"] == "app"
    assert any(f.manager == "kustomize-controller" for f in cm.metadata.managed_fields)
    source = fluxhelpers.ready_condition(api_client, namespace, "app", kind="GitRepository")
    assert source is not None and source.status == "True" and source.at(first)

    # The next commit is found by polling alone (interval 5 s), with nobody asking.
    second = git_server.commit(
        "app",
        {
            "kustomization.yaml": kustomization_yaml("settings.yaml", "extra.yaml"),
            "settings.yaml": configmap("settings", mode="b"),
            "extra.yaml": configmap("extra", added="yes"),
        },
        "settings: mode b; extra",
    )
    ready = fluxhelpers.wait_ready(api_client, namespace, "app", revision=second, timeout_s=60)
    assert ready.status == "True", ready
    assert read_configmap(api_client, namespace, "settings").data == {"mode": "b"}
    assert read_configmap(api_client, namespace, "extra").data == {"added": "yes"}
    assert any(r.startswith("POST /app.git/git-upload-pack") for r in git_server.requests)


@pytest.mark.usefixtures("flux")
def test_flux_prunes_and_reports_a_broken_revision(
    git_server: fluxhelpers.GitServer, namespace: str, api_client: kubernetes.client.ApiClient
) -> None:
    url = git_server.create_repo("app")
    first = git_server.commit(
        "app",
        {
            "kustomization.yaml": kustomization_yaml("keep.yaml", "drop.yaml"),
            "keep.yaml": configmap("keep", v="1"),
            "drop.yaml": configmap("drop", v="1"),
        },
        "two configmaps",
    )
    fluxhelpers.create_git_repository(api_client, namespace, "app", url)
    fluxhelpers.create_kustomization(api_client, namespace, "app", source="app", target_namespace=namespace)
    assert fluxhelpers.wait_ready(api_client, namespace, "app", revision=first).status == "True"
    core = kubernetes.client.CoreV1Api(api_client)
    assert exists(lambda: core.read_namespaced_config_map("drop", namespace))

    # Removed from git: pruned. Asked for at once, as `flux reconcile source git` does.
    second = git_server.commit(
        "app", {"kustomization.yaml": kustomization_yaml("keep.yaml"), "drop.yaml": None}, "drop one"
    )
    fluxhelpers.request_reconcile(api_client, "GitRepository", namespace, "app")
    assert fluxhelpers.wait_ready(api_client, namespace, "app", revision=second, timeout_s=30).status == "True"
    wait_until(lambda: not exists(lambda: core.read_namespaced_config_map("drop", namespace)), 10, "drop pruned")
    assert exists(lambda: core.read_namespaced_config_map("keep", namespace))

    # A revision kustomize cannot build: Ready=False with the reason and kustomize's message;
    # what was applied stays.
    third = git_server.commit("app", {"kustomization.yaml": kustomization_yaml("keep.yaml", "missing.yaml")}, "bad")
    fluxhelpers.request_reconcile(api_client, "GitRepository", namespace, "app")
    failed = fluxhelpers.wait_ready(api_client, namespace, "app", status=None, revision=third, timeout_s=30)
    assert (failed.status, failed.reason) == ("False", "BuildFailed"), failed
    assert "missing.yaml" in failed.message
    assert exists(lambda: core.read_namespaced_config_map("keep", namespace))
