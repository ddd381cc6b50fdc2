"""Confined writes and no takeover (docs/security.md): what a record or a render may make deployctl
write, which existing objects it refuses to take over, and what a failed first install removes.

The release sequences run against the in-memory API server stand-in of test_releases; a write that
confinement should have stopped would show as an object in it, or a call to ``apply`` (which the
stand-in counts)."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml
from test_releases import NOW, FakeKube

from orchestrator import conventions, errors
from orchestrator.apply import applyset, confine, pipeline, sequence, verify
from orchestrator.apply.outcome import Failure, Timings
from orchestrator.kube import kinds
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.records import releases, writer
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
NS = "inference"
RELEASE = "llama3-70b"
PROFILES = [
    *sorted((ROOT / "profiles").glob("*.yaml")),
    ROOT / "tests" / "golden" / "every-option.profile.yaml",
    ROOT / "tests" / "golden" / "lws.profile.yaml",
]


def ours(kind: str = "Deployment", name: str = RELEASE, **meta: Any) -> dict[str, Any]:
    """An object as deployctl renders it for the release."""
    metadata = {"name": name, "namespace": NS, "labels": {conventions.RELEASE_LABEL: RELEASE}, **meta}
    obj = {"apiVersion": kinds.api_version(kind), "kind": kind, "metadata": metadata}
    if kind == conventions.PROMETHEUS_RULE_KIND:
        obj["spec"] = {"groups": []}  # what it holds is checked too (tests/test_observability.py)
    if kind == conventions.HTTP_ROUTE_KIND:
        obj["spec"] = {"rules": [{"backendRefs": [{"name": RELEASE, "port": 8000}]}]}  # where it sends, too
    return obj


def route(*backends: Any) -> dict[str, Any]:
    return {**ours(conventions.HTTP_ROUTE_KIND), "spec": {"rules": [{"backendRefs": list(backends)}]}}


def mirrored() -> dict[str, Any]:
    """The release's route with a filter that copies every request (prompt and key) to another Service."""
    obj = route({"name": RELEASE, "port": 8000})
    mirror = {"backendRef": {"name": "collector", "namespace": "evil", "port": 80}}
    obj["spec"]["rules"][0]["filters"] = [{"type": "RequestMirror", "requestMirror": mirror}]
    return obj


def parent(ref: dict[str, str]) -> dict[str, Any]:
    obj = route({"name": RELEASE, "port": 8000})
    obj["spec"]["parentRefs"] = [ref]  # a Service parent takes over that Service's mesh traffic (GAMMA)
    return obj


class ApplyingKube(FakeKube):
    """The stand-in, with server-side apply (create or replace) and merge patches, counting writes."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[str] = []

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True) -> dict[str, Any]:
        if not dry_run:
            self.applied.append(f"{obj['kind']}/{obj['metadata'].get('namespace')}/{obj['metadata']['name']}")
            self.objects[self._key(obj)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def merge_patch(
        self, kind: str, name: str, namespace: str, patch: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        obj = self.objects[(kind, namespace, name)]
        for key, value in patch.items():
            if isinstance(value, dict) and isinstance(obj.get(key), dict):
                obj[key] = {**obj[key], **value}
            else:
                obj[key] = value
        return copy.deepcopy(obj)


# --- the kinds are the renderer's ------------------------------------------------------------------


def test_the_release_kinds_are_exactly_what_the_templates_render_with_their_api_versions() -> None:
    # One list (kube.kinds.RELEASE_KINDS) for confinement, prune and delete: a template that
    # renders a new kind must add it there, or every restore of it would be refused as tampering.
    templates = ROOT / "orchestrator" / "manifests"
    found = {}
    for path in templates.glob("*.yaml.j2"):
        if path.name == render.CONTROLLER_TEMPLATE:
            continue  # deployctl's own install, never a release's object
        text = path.read_text()
        for api_version, kind in zip(
            [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("apiVersion: ")],
            [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("kind: ")],
            strict=True,
        ):
            found[kind] = api_version
    assert found == {kind: kinds.api_version(kind) for kind in kinds.RELEASE_KINDS}
    assert kinds.RELEASE_KINDS == applyset.MANAGED_KINDS


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_rendered_profile_is_inside_its_release(path: pathlib.Path) -> None:
    prof = profile.load(path)
    objects = render.render(prof, planner.plan(prof))

    assert confine.problems(prof.metadata.name, prof.metadata.namespace, objects) == []


def test_the_example_profiles_render_every_release_kind() -> None:
    rendered = set()
    for path in PROFILES:
        prof = profile.load(path)
        rendered |= {o["kind"] for o in render.render(prof, planner.plan(prof))}
    assert rendered == set(kinds.RELEASE_KINDS)


# --- what a record may not make deployctl write ----------------------------------------------------


def cluster_role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "pwned", "labels": {conventions.RELEASE_LABEL: RELEASE}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
    }


@pytest.mark.parametrize(
    ("obj", "says"),
    [
        (cluster_role_binding(), "ClusterRoleBinding/pwned is not a kind deployctl renders for a release"),
        (ours(namespace="kube-system"), "Deployment/llama3-70b in namespace kube-system is outside the release's"),
        ({**ours(), "metadata": {"name": RELEASE, "labels": {conventions.RELEASE_LABEL: RELEASE}}}, "outside"),
        (ours(labels={}), f"is not labelled {conventions.RELEASE_LABEL}={RELEASE}"),
        (ours(labels={conventions.RELEASE_LABEL: "other"}), "is not labelled"),
        ({**ours(), "apiVersion": "extensions/v1beta1"}, "has apiVersion extensions/v1beta1, not apps/v1"),
        (
            {**ours("Service"), "kind": "Secret", "apiVersion": "v1"},
            "Secret/llama3-70b in namespace inference is not a kind",
        ),
        (["not", "an", "object"], "object #2 is not a Kubernetes object"),
        # A route sends a Gateway's requests (its hostnames') wherever it says, and a filter may mirror them.
        (route({"name": "payments", "port": 80}), "its backend is not the release's Service llama3-70b"),
        (route({"name": RELEASE, "namespace": "payments", "port": 80}), "its backend is not the release's Service"),
        (route({"name": RELEASE, "kind": "Backend", "group": "x.io"}), "its backend is not the release's Service"),
        (route({"name": RELEASE}, {"name": f"{RELEASE}-canary"}), "a rule is not the one backend deployctl renders"),
        (route("not a backend"), "its backend is not the release's Service"),
        (mirrored(), "a rule is not the one backend deployctl renders"),
        (parent({"group": "", "kind": "Service", "name": "payments"}), "a parent is not a Gateway"),
        ({**ours(conventions.HTTP_ROUTE_KIND), "spec": None}, "its spec is not an object"),
    ],
)
def test_an_object_outside_the_release_is_refused_as_tampering_exit_9(obj: Any, says: str) -> None:
    with pytest.raises(errors.OutsideRelease) as refused:
        confine.check(RELEASE, NS, [ours("Service"), obj], "revision 2's stored manifests")

    assert refused.value.exit_code == errors.ExitCode.AUDIT_FAILED
    assert says in refused.value.message
    assert "revision 2's stored manifests of release llama3-70b" in refused.value.message
    assert "tampering: nothing was written" in refused.value.message


def test_the_release_own_objects_pass() -> None:
    confine.check(RELEASE, NS, [ours(k) for k in kinds.RELEASE_KINDS], "the rendered profile")
    gateway = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": "gateways"}
    confine.check(RELEASE, NS, [parent(gateway)], "the rendered profile")


def test_stored_manifests_that_are_not_yaml_objects_are_tampering_not_a_traceback() -> None:
    for manifests in (b"\xff\xfe", b"kind: [unclosed", b"- a list\n", b"a: " + b"9" * 5000 + b"\n"):
        with pytest.raises(errors.OutsideRelease, match="changed outside deployctl"):
            confine.stored_objects(manifests, "revision 1's stored manifests", RELEASE, NS)


# --- no takeover ----------------------------------------------------------------------------------


def foreign_service(kube: FakeKube, **labels: str) -> None:
    """Another team's Service, named like the release, applied with kubectl."""
    kube.objects[("Service", NS, RELEASE)] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": RELEASE,
            "namespace": NS,
            "labels": {"app": "billing", **labels},
            "managedFields": [{"manager": "kubectl-client-side-apply"}],
        },
        "spec": {"selector": {"app": "billing"}},
    }


def test_an_existing_object_without_the_release_label_is_refused_naming_it_and_adopt() -> None:
    kube = FakeKube()
    foreign_service(kube)

    with pytest.raises(errors.Takeover) as refused:
        confine.before_writing(RELEASE, NS, [ours(), ours("Service")], kube.get, "the rendered profile", False)

    assert refused.value.exit_code == errors.ExitCode.ROLLOUT_FAILED
    message = refused.value.message
    assert "would take over Service/llama3-70b (applied by kubectl-client-side-apply)" in message
    assert "Nothing was changed" in message and "--adopt" in message
    assert "Deployment" not in message  # it does not exist: created, not taken over


def test_adopt_takes_over_unlabelled_objects_and_says_so_for_the_record() -> None:
    kube = FakeKube()
    foreign_service(kube)

    found, adopted = confine.before_writing(
        RELEASE, NS, [ours(), ours("Service")], kube.get, "the rendered profile", True
    )

    assert [e.ref for e in found] == [e.ref for e in adopted] == ["Service/llama3-70b"]
    assert confine.adoption(adopted) == ", adopting Service/llama3-70b (--adopt)"
    assert confine.adoption([]) == ""


def test_an_object_of_another_release_is_never_adopted() -> None:
    kube = FakeKube()
    foreign_service(kube, **{conventions.RELEASE_LABEL: "billing"})

    with pytest.raises(errors.Takeover, match="Service/llama3-70b \\(it belongs to release billing\\)"):
        confine.before_writing(RELEASE, NS, [ours("Service")], kube.get, "the rendered profile", True)


def test_the_release_own_existing_objects_are_no_takeover() -> None:
    kube = FakeKube()
    foreign_service(kube, **{conventions.RELEASE_LABEL: RELEASE})

    found, adopted = confine.before_writing(RELEASE, NS, [ours("Service")], kube.get, "an upgrade", False)

    assert [e.ref for e in found] == ["Service/llama3-70b"] and adopted == []


# --- the release sequences ------------------------------------------------------------------------


def store(kube: FakeKube, objects: list[dict[str, Any]], revision: int = 1) -> releases.Record:
    """A deployed record holding ``objects``, with valid hashes: what anyone who may create
    ConfigMaps in the namespace can write."""
    text = yaml.safe_dump_all(objects, sort_keys=False).encode()
    return writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=text,
                profile_text="apiVersion: deployctl/v1\nkind: InferenceProfile\n",
                plan=None,
                model=releases.ModelRef(name="m", revision=None),
                image="registry.internal/vllm/vllm-openai:v1",
                profile_hash="sha256:v1",
                actor={"user": "mallory", "ci": {}},
            ),
            outcome="deployed",
            description="install" if revision == 1 else "upgrade",
        ),
        now=NOW,
    )


def forged_record(kube: FakeKube) -> releases.Record:
    return store(kube, [ours(), ours(namespace="kube-system"), cluster_role_binding()])


def test_rollback_to_a_record_with_objects_outside_the_release_writes_nothing_and_records_nothing() -> None:
    kube = ApplyingKube()
    target = forged_record(kube)
    records = kube.creates

    with pytest.raises(errors.OutsideRelease) as refused:
        pipeline.restore(kube, target, "rollback to 1", sequence.Options(), lambda *_: None, {"user": "bob"})

    assert "Deployment/llama3-70b in namespace kube-system is outside" in refused.value.message
    assert "ClusterRoleBinding/pwned is not a kind" in refused.value.message
    assert kube.applied == [] and kube.creates == records  # no object, and no record copying the bytes


def test_rollback_refuses_to_take_over_an_object_that_is_no_longer_the_release() -> None:
    kube = ApplyingKube()
    target = store(kube, [ours(), ours("Service")])
    foreign_service(kube)  # after an uninstall, another team took the name

    with pytest.raises(errors.Takeover, match="would take over Service/llama3-70b"):
        pipeline.restore(kube, target, "rollback to 1", sequence.Options(), lambda *_: None, {"user": "bob"})
    assert kube.applied == []


def fail(kube: FakeKube, live: releases.Record | None, existed: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """A failed apply of revision 2 (or a failed first install) as ``_deploy`` ends one."""
    draft = writer.Draft(
        RELEASE,
        NS,
        yaml.safe_dump(ours()).encode(),
        "apiVersion: deployctl/v1\nkind: InferenceProfile\n",
        None,
        releases.ModelRef(name="m", revision=None),
        "registry.internal/vllm/vllm-openai:v2",
        "sha256:v2",
        {"user": "alice", "ci": {}},
    )
    failure = Failure("crash_loop", "the new pods crash", "rollout")
    return pipeline._fail(
        kube,  # type: ignore[arg-type]
        draft,
        "upgrade from revision 1",
        live,
        failure,
        verify.Judgement(None),
        sequence.Options(),
        lambda *_: None,
        Timings(),
        existed,
    )


def test_a_failed_apply_does_not_restore_a_forged_record_and_says_it_was_refused() -> None:
    kube = ApplyingKube()
    live = forged_record(kube)

    ending = fail(kube, live)

    assert ending.result == "rollback_failed" and ending.exit_code == errors.ExitCode.ROLLBACK_FAILED
    assert "the rollback to 1 was refused" in ending.message and "tampering" in ending.message
    assert kube.applied == []
    assert [r.outcome for r in releases.load_history(kube, RELEASE, NS)] == ["deployed", "failed"]


def test_a_failed_first_install_removes_what_it_created_and_leaves_what_it_adopted() -> None:
    kube = ApplyingKube()
    foreign_service(kube, **{conventions.RELEASE_LABEL: RELEASE})  # adopted by this install's apply
    kube.objects[("Deployment", NS, RELEASE)] = ours()  # created by it

    ending = fail(kube, None, existed=frozenset({("Service", RELEASE)}))

    assert ending.result == "rolled_back"
    assert ("Deployment", NS, RELEASE) not in kube.objects
    assert ("Service", NS, RELEASE) in kube.objects
    assert "Service/llama3-70b existed before it and were left" in ending.message


# --- junk record ConfigMaps ------------------------------------------------------------------------


def junk(kube: FakeKube, name: str, data: dict[str, str] | None = None) -> None:
    kube.create(
        {
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {releases.LABEL_RECORD: "true", releases.LABEL_RELEASE: RELEASE},
            },
            "data": data if data is not None else {"hello": "world"},
        }
    )


def test_a_junk_configmap_with_the_record_labels_is_skipped_and_said_never_blocking() -> None:
    kube = FakeKube()
    first = store(kube, [ours()])
    junk(kube, "junk")
    said: list[str] = []

    history = releases.load_history(kube, RELEASE, NS, warn=said.append)

    assert history == [first]
    assert said == [releases.foreign_message("junk", RELEASE, NS)]
    assert "ConfigMap junk in namespace inference has the labels of a record of release llama3-70b" in said[0]
    assert "skipped" in said[0]
    second = store(kube, [ours()], revision=2)  # the next record chains on as if it were not there
    assert second.revision == 2 and second.prev_hash == first.hash


def test_a_copy_of_a_record_under_another_name_is_foreign_not_a_revision() -> None:
    kube = FakeKube()
    first = store(kube, [ours()])
    copied = kube.get("ConfigMap", releases.record_name(RELEASE, 1), NS)
    assert copied is not None
    copied["metadata"]["name"] = "deployctl.llama3-70b.v1-copy"
    kube.create(copied)
    said: list[str] = []

    assert releases.load_history(kube, RELEASE, NS, warn=said.append) == [first]
    assert len(said) == 1 and "deployctl.llama3-70b.v1-copy" in said[0]


@pytest.mark.parametrize("name", ["deployctl.llama3-70b.v2", "deployctl.llama3-70b.v1"])
def test_an_unreadable_configmap_under_a_record_name_is_still_tampering_exit_9(name: str) -> None:
    # Under a record's name it holds that revision's place in the chain: refused as before.
    kube = FakeKube()
    if name.endswith("v2"):
        store(kube, [ours()])
    junk(kube, name)

    with pytest.raises(errors.AuditFailed, match=f"unreadable records: {name}"):
        releases.load_history(kube, RELEASE, NS, warn=lambda m: None)


def test_a_newer_format_under_a_record_name_is_refused_and_under_another_name_skipped() -> None:
    kube = FakeKube()
    store(kube, [ours()])
    junk(kube, "notes", {"record.json": "{}"})
    kube.objects[("ConfigMap", NS, "notes")]["metadata"]["labels"][releases.LABEL_FORMAT] = "99"
    assert len(releases.load_history(kube, RELEASE, NS)) == 1

    junk(kube, "deployctl.llama3-70b.v2", {"record.json": "{}"})
    kube.objects[("ConfigMap", NS, "deployctl.llama3-70b.v2")]["metadata"]["labels"][releases.LABEL_FORMAT] = "99"
    with pytest.raises(errors.NewerRecordFormat):
        releases.load_history(kube, RELEASE, NS)


@pytest.mark.parametrize(
    ("name", "slot"),
    [
        ("deployctl.llama3-70b.v1", True),
        ("deployctl.llama3-70b.v12", True),
        ("deployctl.llama3-70b.v0", False),
        ("deployctl.llama3-70b.v01", False),
        ("deployctl.llama3-70bXv1", False),
        ("deployctl.llama3-70b.v1.bak", False),
        ("deployctl.other.v1", False),
    ],
)
def test_record_names(name: str, slot: bool) -> None:
    assert releases.is_record_name(name, RELEASE) is slot


# --- the controller: validate before the finalizer, delete only its own release --------------------

CONTROLLER_USER = "system:serviceaccount:deployctl-system:deployctl-controller"


class ControllerKube(ApplyingKube):
    """The stand-in, naming Events as the API server does (generateName)."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        if "name" not in meta and "generateName" in meta:
            obj = {**obj, "metadata": {**meta, "name": f"{meta['generateName']}{self.creates}"}}
        return super().create(obj)


class _Lease:
    identity = "test/pid-1"

    def lost_reason(self) -> None:
        return None


def reconciler(kube: FakeKube) -> Any:
    from orchestrator.controller import reconciler as controller

    settings = controller.Settings(namespace=NS, lease_namespace="deployctl-system")
    return controller._Reconciler(kube, settings, CONTROLLER_USER, _Lease(), lambda *_: None)  # type: ignore[arg-type]


def inference_profile(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    metadata = {"name": RELEASE, "namespace": NS, "resourceVersion": "7", "generation": 1, **meta}
    return {"apiVersion": profile.RESOURCE_API_VERSION, "kind": profile.KIND, "metadata": metadata, "spec": spec}


def test_the_controller_gives_an_invalid_object_no_finalizer_and_refuses_it() -> None:
    from orchestrator.controller import reconciler as controller

    kube = ControllerKube()
    invalid = inference_profile({"model": {"name": "x"}})
    kube.objects[(profile.KIND, NS, RELEASE)] = invalid

    reconciler(kube).reconcile(invalid)

    stored = kube.objects[(profile.KIND, NS, RELEASE)]
    assert controller.FINALIZER not in (stored["metadata"].get("finalizers") or [])
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["Planned"]["status"] == "False" and conditions["Planned"]["reason"] == "invalid"
    assert not controller._valid(invalid)
    dev = profile.load(ROOT / "profiles" / "dev-tp2.yaml")
    assert controller._valid(profile.to_object(dev))


@pytest.mark.parametrize(("creator", "removed"), [(CONTROLLER_USER, True), ("alice", False), (None, False)])
def test_deleting_an_object_removes_only_a_release_the_controller_created(creator: str | None, removed: bool) -> None:
    from orchestrator.controller import reconciler as controller

    kube = ControllerKube()
    obj = inference_profile(
        {}, finalizers=[controller.FINALIZER], deletionTimestamp="2024-05-01T12:00:00Z", resourceVersion="8"
    )
    kube.objects[(profile.KIND, NS, RELEASE)] = obj
    kube.objects[("Deployment", NS, RELEASE)] = ours()
    if creator is not None:
        record = store(kube, [ours()])
        if creator != record.actor["user"]:
            kube.objects.pop(("ConfigMap", NS, releases.record_name(RELEASE, 1)))
            writer.append(
                kube,
                writer.NewRecord(
                    writer.Draft(
                        RELEASE,
                        NS,
                        manifests=b"",
                        profile_text="",
                        plan=None,
                        model=releases.ModelRef(name="m", revision=None),
                        image="i",
                        profile_hash="h",
                        actor={"user": creator, "ci": {}},
                    ),
                    outcome="deployed",
                    description="install",
                ),
                now=NOW,
            )

    reconciler(kube).reconcile(obj)

    assert (("Deployment", NS, RELEASE) not in kube.objects) is removed
    assert kube.objects[(profile.KIND, NS, RELEASE)]["metadata"]["finalizers"] == []  # the object may go


# --- the docs quote the messages -------------------------------------------------------------------


def _text_blocks(page: str) -> list[str]:
    """Each ```text block of a docs page, its lines joined as one paragraph."""
    text = (ROOT / "docs" / page).read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```text\n")[1:]]
    return [" ".join(block.split()) for block in blocks]


def test_the_security_page_quotes_the_refusals_as_deployctl_says_them() -> None:
    with pytest.raises(errors.OutsideRelease) as outside:
        confine.check(
            RELEASE,
            NS,
            [ours(), ours(namespace="kube-system"), cluster_role_binding()],
            "revision 1's stored manifests",
        )
    kube = FakeKube()
    kube.objects[("Service", "shared", "billing-api")] = {
        "metadata": {"name": "billing-api", "managedFields": [{"manager": "kubectl-client-side-apply"}]}
    }
    service = {
        **ours("Service", name="billing-api", namespace="shared"),
        "metadata": {
            "name": "billing-api",
            "namespace": "shared",
            "labels": {conventions.RELEASE_LABEL: "billing-api"},
        },
    }
    with pytest.raises(errors.Takeover) as takeover:
        confine.before_writing("billing-api", "shared", [service], kube.get, "the rendered profile", False)

    assert _text_blocks("security.md") == [outside.value.message, takeover.value.message]
    assert releases.foreign_message("junk", RELEASE, NS) in _text_blocks("record-format.md")
