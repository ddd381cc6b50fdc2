"""The controller's rights as `render --format controller` and `controller-namespace` grant them: reads
cluster-wide, writes only in the namespaces opted in, Leases only there and its own leader Lease.

e2e/test_policy_cluster.py shows on the real API server that its ServiceAccount cannot write in a namespace
that is not opted in; here the rendered rules are held to that.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.apply import cluster_preflight
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import preflight
from orchestrator.render import manifests as render

IMAGE = "registry.internal/deployctl/controller@sha256:" + "ab" * 32
READS = {"get", "list", "watch"}


def rendered(*watch: str, namespace: str = "deployctl-system") -> list[dict[str, Any]]:
    return render.controller(namespace, IMAGE, watch)


def rules_of(objects: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    """Rules by the namespace of the Role (``""`` for the ClusterRole), all of a namespace's Roles together."""
    rules: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        if o["kind"] == kind:
            rules.setdefault(o["metadata"].get("namespace", ""), []).extend(o["rules"])
    return rules


def role(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    (found,) = [o["rules"] for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == name]
    return found


def grants(rules: list[dict[str, Any]], resource: str, verb: str) -> bool:
    return any(resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_the_cluster_role_only_reads_and_reads_no_configmaps_secrets_logs_or_port_forwards() -> None:
    (cluster_rules,) = rules_of(rendered("team-a"), "ClusterRole").values()
    assert all(set(r["verbs"]) <= READS for r in cluster_rules), cluster_rules
    named = {res for r in cluster_rules for res in r["resources"]}
    assert named == {"inferenceprofiles", "inferencepolicies", "nodes", "pods"}
    assert grants(cluster_rules, "pods", "list") and not grants(cluster_rules, "pods", "get")


def test_writes_and_lease_writes_are_only_in_the_opted_in_namespaces_and_its_own_leader_lease() -> None:
    objects = rendered("team-a", "team-b")
    roles = rules_of(objects, "Role")
    assert set(roles) == {"deployctl-system", "team-a", "team-b"}
    (leader,) = role(objects, "deployctl-controller-leader")
    assert leader["resources"] == ["leases"] and leader["resourceNames"] == ["deployctl-controller"]
    assert set(leader["verbs"]) == {"get", "update"}
    # Its own namespace's other Role reads the records' signing key, by name, and nothing else.
    (signing_key,) = role(objects, "deployctl-controller-signing-key")
    assert signing_key == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["deployctl-signing-key"],
        "verbs": ["get"],
    }
    assert len(roles["deployctl-system"]) == 2
    for namespace in ("team-a", "team-b"):
        assert grants(roles[namespace], "deployments", "patch") and grants(roles[namespace], "leases", "create")
        assert grants(roles[namespace], "inferenceprofiles/status", "patch")
        assert grants(roles[namespace], "pods/portforward", "create")
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {"deployctl-system", "team-a", "team-b"}
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "deployctl-controller", "namespace": "deployctl-system"}
        ]


def test_without_opted_in_namespaces_the_controller_may_write_nothing_but_its_leader_lease() -> None:
    objects = rendered()
    assert set(rules_of(objects, "Role")) == {"deployctl-system"}
    kinds = [o["kind"] for o in objects]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Lease",
        "Role",
        "RoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ]


def test_controller_namespace_renders_the_same_role_and_binding_as_watch_namespace() -> None:
    later = render.controller_namespace("deployctl-system", ["team-a"])
    at_install = [o for o in rendered("team-a") if o["metadata"].get("namespace") == "team-a"]
    assert later == at_install and [o["kind"] for o in later] == ["Role", "RoleBinding"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--format", "controller-namespace"], "give the namespaces to opt in with --watch-namespace"),
        (["--format", "controller-namespace", "--watch-namespace", "Team_A"], "--watch-namespace Team_A is not"),
        (["--format", "controller", "--image", IMAGE, "--watch-namespace", "x" * 64], "is not a namespace name"),
    ],
)
def test_a_missing_or_bad_watch_namespace_is_refused_with_exit_2_and_nothing_rendered(
    args: list[str], says: str
) -> None:
    result = CliRunner().invoke(cli.main, ["render", *args, "-o", "json"])
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert says in result.stderr and "items" not in result.stdout


def test_watch_namespace_reaches_the_render_and_repeats() -> None:
    result = CliRunner().invoke(
        cli.main,
        ["render", "--format", "controller", "--image", IMAGE, "--watch-namespace", "a", "--watch-namespace", "b"],
    )
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"} == {"deployctl-system", "a", "b"}


class _Recorder:
    """Answers preflight's lists with nothing, and remembers what was asked."""

    def __init__(self) -> None:
        self.lists: list[tuple[str, str | None, str | None]] = []

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        self.lists.append((kind, namespace, fields))
        return [], "1"

    def get(self, kind: str, name: str, namespace: str | None = None) -> None:
        return None


def test_preflight_lists_only_scheduled_unfinished_pods_cluster_wide() -> None:
    from orchestrator.plan import planner
    from orchestrator.profile import model as profiles

    prof = profiles.load(pathlib.Path(__file__).resolve().parent.parent / "profiles" / "dev-tp2.yaml")
    kube = _Recorder()
    cluster_preflight._verdict(kube, prof, render.render(prof, planner.plan(prof)))  # type: ignore[arg-type]
    assert ("Pod", None, preflight.POD_FIELDS) in kube.lists
    assert preflight.POD_FIELDS == "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
