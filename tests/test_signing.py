"""Signed release records: DSSE envelopes over in-toto Statements, checked on every read that writes.

The golden format 3 records (tests/data/records/format-3) are signed with the TEST key in
tests/data/keys; a standard DSSE verifier (securesystemslib) must accept them. Forgeries are made
the way a namespace editor would: with deployctl's own library, valid hashes, and no key.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import pathlib
import stat
from typing import Any

import click.testing
import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey
from test_record_format import golden_configmaps, golden_export, store
from test_releases import NOW, FakeKube

from orchestrator import errors
from orchestrator.apply import pipeline, sequence
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.records import attestation, audit, encoding, releases, revisions, signing, writer
from orchestrator.records import trust as record_trust

KEYS = pathlib.Path(__file__).resolve().parent / "data" / "keys"
TEST_KEY = KEYS / "TEST-ONLY-signing-key.pem"
TEST_PUB = KEYS / "TEST-ONLY-signing-key.pub"
OTHER_KEY = KEYS / "TEST-ONLY-other-key.pem"  # ECDSA P-256
OTHER_PUB = KEYS / "TEST-ONLY-other-key.pub"
RELEASE, NS = "llama3-70b", "inference"


def keys(private: pathlib.Path | None = TEST_KEY, *public: pathlib.Path) -> record_trust.Keys:
    return record_trust.load(str(private) if private else None, [str(p) for p in public])


def history(kube: FakeKube) -> list[releases.Record]:
    return releases.load_history(kube, RELEASE, NS)


def forge(kube: FakeKube, *, outcome: releases.Outcome = "deployed", manifests: bytes | None = None) -> releases.Record:
    """What a namespace editor can do with deployctl's library: append a record with valid hashes."""
    live = history(kube)[-1]
    evil = manifests or (
        b"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: pwned\n"
        b"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n"
    )
    return writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=evil,
                profile_text=live.profile,
                plan=live.plan,
                model=live.model,
                image=live.image,
                profile_hash=live.profile_hash,
                actor={"user": "deployctl", "ci": {}},
            ),
            outcome=outcome,
            description="install",
        ),
        now=NOW,
    )


def run(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl")


# --- the envelope ---------------------------------------------------------------------------------


def test_pae_is_the_dsse_spec_encoding() -> None:
    # The example of github.com/secure-systems-lab/dsse protocol.md.
    assert signing.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


@pytest.mark.parametrize("key", [TEST_KEY, OTHER_KEY], ids=["ed25519", "ecdsa-p256"])
def test_a_standard_dsse_verifier_accepts_what_deployctl_writes(key: pathlib.Path) -> None:
    signer = signing.load_signer(str(key))
    body = releases.from_configmap(golden_configmaps(3)[1]).body()
    env = attestation.sign(body, releases.from_configmap(golden_configmaps(3)[1]).manifests, signer)

    theirs = Envelope.from_dict(copy.deepcopy(env))
    accepted = theirs.verify([SSlibKey.from_crypto(signer.public, keyid=signer.keyid)], 1)

    assert list(accepted) == [signer.keyid]
    statement = json.loads(theirs.payload)
    assert theirs.payload_type == "application/vnd.in-toto+json"
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://deployctl.dev/release/v1"
    assert statement["predicate"] == body


def test_the_golden_format_3_records_verify_with_securesystemslib_and_name_manifests_and_image() -> None:
    public = signing.load_public_keys([str(TEST_PUB)])
    (keyid, key), *_ = public.keys.items()
    for cm in golden_configmaps(3):
        env = json.loads(cm["data"][releases.SIGNATURE_KEY])
        Envelope.from_dict(env).verify([SSlibKey.from_crypto(key, keyid=keyid)], 1)
    record = releases.from_configmap(golden_configmaps(3)[0])
    names = [s["name"] for s in attestation.statement(record.body(), record.manifests)["subject"]]
    assert "Deployment/inference/llama3-70b" in names
    assert names[-1] == record.image.partition("@")[0]
    assert record.prev_hash == "" and record.profile_hash in json.dumps(record.body())


def test_the_keyid_is_the_sha256_of_the_public_key_der() -> None:
    signer = signing.load_signer(str(TEST_KEY))
    public = signing.load_public_keys([str(TEST_PUB)])
    assert list(public.keys) == [signer.keyid] and len(signer.keyid) == 64


# --- tampering ------------------------------------------------------------------------------------


def signed_record(index: int = 1) -> releases.Record:
    return releases.from_configmap(golden_configmaps(3)[index])


def test_a_signed_golden_record_checks_with_its_key_and_not_with_another() -> None:
    record = signed_record()
    assert record.check_signature(keys().trusted) == signing.load_signer(str(TEST_KEY)).keyid
    with pytest.raises(signing.SignatureError, match="no signature verifies with a trusted key"):
        record.check_signature(keys(None, OTHER_PUB).trusted)


def test_a_changed_payload_does_not_verify() -> None:
    record = signed_record()
    env = copy.deepcopy(record.envelope)
    assert env is not None
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["predicate"]["image"] = "evil.example/vllm@sha256:" + "0" * 64
    env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(signing.SignatureError, match="no signature verifies"):
        record.model_copy(update={"envelope": env}).check_signature(keys().trusted)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"description": "install (edited)"}, "covers another record.json"),
        ({"manifests": b"kind: ClusterRoleBinding\nmetadata: {name: pwned}\n"}, "covers other manifests"),
        ({"manifests": b"\xff\xfe not yaml"}, "its manifests are not YAML"),
        ({"envelope": None}, "it is not signed"),
    ],
)
def test_a_record_whose_content_or_manifests_changed_under_its_signature_is_refused(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(signing.SignatureError, match=says):
        signed_record().model_copy(update=change).check_signature(keys().trusted)


def test_a_signature_moved_from_another_record_is_refused() -> None:
    first, second = signed_record(0), signed_record(1)
    with pytest.raises(signing.SignatureError, match=r"covers another record\.json"):
        second.model_copy(update={"envelope": first.envelope}).check_signature(keys().trusted)


def test_a_forged_record_appended_with_valid_hashes_is_never_live_nor_restored() -> None:
    kube = store(3)
    kube.objects.pop(("ConfigMap", NS, "deployctl.llama3-70b.v5"))  # before the uninstall: 4 is live
    forged = forge(kube)
    records = history(kube)
    assert audit.verify(records, release=RELEASE, namespace=NS) == []  # the chain alone cannot tell

    checked = record_trust.check(records, keys(), RELEASE, NS)

    assert [r.revision for r in checked.trusted] == [1, 2, 3, 4]
    assert [r.record.revision for r in checked.refused] == [forged.revision]
    assert revisions.live(checked.trusted).revision == 4  # type: ignore[union-attr]
    message = checked.refused[0].message()
    assert "revision 5 (ConfigMap deployctl.llama3-70b.v5) is not used: it is not signed" in message
    assert "deployctl audit verify llama3-70b --key" in message and "deployctl audit trust" in message
    with pytest.raises(errors.AuditFailed, match="revision 5 of llama3-70b is not restored") as refused:
        record_trust.require(checked, forged)
    assert refused.value.exit_code == ExitCode.AUDIT_FAILED


def test_a_forged_uninstall_cannot_make_a_failed_apply_look_like_a_first_install() -> None:
    kube = store(3)
    kube.objects.pop(("ConfigMap", NS, "deployctl.llama3-70b.v5"))
    forge(kube, outcome="uninstalled")
    checked = record_trust.check(history(kube), keys(), RELEASE, NS)
    assert revisions.live(checked.trusted) is not None  # else a failed apply would remove the release


def test_a_record_signed_by_an_untrusted_key_is_refused_like_an_unsigned_one() -> None:
    kube = store(3)
    mallory = signing.load_signer(str(OTHER_KEY))
    live = history(kube)[3]
    writer.append(
        kube,
        writer.NewRecord(
            writer.Draft.of(live, {}, mallory),
            outcome="deployed",
            description="rollback",
            rollback_of=4,
        ),
    )
    checked = record_trust.check(history(kube), keys(), RELEASE, NS)
    assert [(r.record.revision, "no signature verifies" in r.reason) for r in checked.refused] == [(6, True)]


def test_restore_refuses_a_forged_target_before_writing_anything() -> None:
    kube = store(3)
    forged = forge(kube)
    creates = kube.creates
    options = sequence.Options(keys=keys())

    outcome = pipeline.restore(kube, forged, "rollback", options, lambda *_: None, {})  # type: ignore[arg-type]

    assert (outcome.result, outcome.exit_code, outcome.revision) == ("rollback_failed", ExitCode.ROLLBACK_FAILED, None)
    assert outcome.failure is not None and outcome.failure.cls == "record_refused"
    assert "revision 6 of llama3-70b is not restored: revision 6 (ConfigMap deployctl.llama3-70b.v6)" in outcome.message
    assert "it is not signed" in outcome.message
    assert kube.creates == creates  # nothing applied, nothing recorded


def test_a_signed_release_is_refused_when_no_key_is_configured() -> None:
    with pytest.raises(errors.AuditFailed, match=r"has signed records .* no key is configured to check them"):
        record_trust.check(history(store(3)), record_trust.Keys(), RELEASE, NS)


def test_an_unsigned_release_without_keys_reads_as_before_signing() -> None:
    records = history(store(2))
    checked = record_trust.check(records, record_trust.Keys(), RELEASE, NS)
    assert checked.trusted == records and not checked.refused


def test_a_signed_record_copied_from_another_release_is_refused() -> None:
    records = history(store(3))
    checked = record_trust.check(records, keys(), "other", NS)
    assert all("it was copied here" in r.reason for r in checked.refused) and not checked.trusted


def test_new_records_are_signed_and_chain_on_from_signed_ones() -> None:
    kube = store(3)
    old = history(kube)[3]
    new = writer.append(
        kube,
        writer.NewRecord(
            writer.Draft.of(old, {}, keys().signer),
            outcome="deployed",
            description="rollback to 4",
            rollback_of=4,
        ),
    )
    cm = kube.get("ConfigMap", releases.record_name(RELEASE, new.revision), NS)
    assert cm is not None and releases.SIGNATURE_KEY in cm["data"]
    checked = record_trust.check(history(kube), keys(), RELEASE, NS)
    assert not checked.refused and checked.trusted[-1].revision == 6


# --- the trust step -------------------------------------------------------------------------------


def trust(kube: FakeKube, up_to: int) -> releases.Record:
    checked = record_trust.check(history(kube), keys(), RELEASE, NS)
    base = revisions.get(history(kube), up_to)
    return writer.append(
        kube,
        writer.NewRecord(
            writer.Draft.following(base, {}, keys().signer, manifests=b"", profile_text=""),
            outcome="trusted",
            description="trust step",
            trust=record_trust.trust_body(checked, up_to),
        ),
    )


@pytest.mark.parametrize("fmt", [1, 2])
def test_records_from_before_signing_are_refused_until_a_trust_step_covers_them(fmt: int) -> None:
    kube = store(fmt)
    assert [r.reason for r in record_trust.check(history(kube), keys(), RELEASE, NS).refused] == [
        "it is not signed, and no trust step covers it"
    ] * 5

    step = trust(kube, 5)
    checked = record_trust.check(history(kube), keys(), RELEASE, NS)

    assert not checked.refused and [r.revision for r in checked.trusted] == [1, 2, 3, 4, 5, 6]
    assert step.outcome == "trusted" and step.trust == {"up_to": 5, "head": history(kube)[4].hash}
    assert revisions.status_of(checked.trusted)[6] == "trusted"
    target = revisions.rollback_target(checked.trusted)
    assert target is not None and target.revision == 4  # as before the trust step: it deployed nothing


def test_a_trust_step_covers_only_up_to_its_revision_and_a_later_forgery_is_refused() -> None:
    kube = store(2)
    trust(kube, 3)
    forge(kube)
    refused = record_trust.check(history(kube), keys(), RELEASE, NS).refused
    assert [r.record.revision for r in refused] == [4, 5, 7]


def test_a_trust_step_does_not_cover_a_record_rewritten_below_its_head() -> None:
    kube = store(2)
    trust(kube, 5)
    cm = kube.objects[("ConfigMap", NS, "deployctl.llama3-70b.v2")]
    body = json.loads(cm["data"]["record.json"])
    body["image"] = "evil.example/vllm:latest"
    cm["data"]["record.json"] = encoding.canonical_json(body).decode()
    cm["metadata"]["annotations"][releases.ANNOTATION_HASH] = encoding.sha256(encoding.canonical_json(body))
    refused = record_trust.check(history(kube), keys(), RELEASE, NS).refused
    assert [r.record.revision for r in refused] == [1, 2]  # 3-5 still chain to the signed head


def test_a_trusted_outcome_in_a_format_2_record_is_refused() -> None:
    body = releases.from_configmap(golden_configmaps(2)[0]).body() | {"outcome": "trusted"}
    with pytest.raises(ValueError, match="outcome 'trusted', which record format 2 does not have"):
        releases.record_from_body(body, hash="", manifests=b"")


# --- audit verify --key and the export ------------------------------------------------------------


def write(tmp_path: pathlib.Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_export_carries_the_envelopes_and_verifies_offline_with_the_public_key_alone(
    tmp_path: pathlib.Path,
) -> None:
    doc = golden_export(3)
    assert all("envelope" in entry for entry in doc["records"])
    path = write(tmp_path, doc)

    good = run("audit", "verify", "--file", path, "--key", str(TEST_PUB), "-o", "json")
    wrong = run("audit", "verify", "--file", path, "--key", str(OTHER_PUB))

    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["ok"] is True and json.loads(good.stdout)["signatures"] == "checked"
    assert wrong.exit_code == ExitCode.AUDIT_FAILED
    assert "revision 1: no signature verifies with a trusted key" in wrong.stdout


def test_an_export_with_a_forged_record_fails_audit_verify_key(tmp_path: pathlib.Path) -> None:
    kube = store(3)
    forge(kube)
    doc = json.loads(json.dumps(audit.export(history(kube), release=RELEASE, namespace=NS, now=NOW)))
    path = write(tmp_path, doc)

    chain_only = run("audit", "verify", "--file", path)
    with_key = run("audit", "verify", "--file", path, "--key", str(TEST_PUB), "-o", "json")

    assert chain_only.exit_code == 0, chain_only.output  # the hashes are valid: what the issue found
    assert with_key.exit_code == ExitCode.AUDIT_FAILED
    problems = json.loads(with_key.stdout)["problems"]
    assert [(p["revision"], p["code"], p["source"]) for p in problems] == [(6, "signature", "export")]


def test_an_export_entry_whose_envelope_is_not_an_object_is_unreadable() -> None:
    doc = golden_export(3)
    doc["records"][0]["envelope"] = "AAAA"
    assert next((p.revision, p.code) for p in audit.verify_export(doc)) == (1, "unreadable")


# --- key files ------------------------------------------------------------------------------------


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path: pathlib.Path) -> None:
    private = tmp_path / "k.pem"
    result = run("keygen", str(private), "-o", "json")
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert written["public_key_file"] == str(tmp_path / "k.pub")
    assert signing.load_signer(str(private)).keyid == written["keyid"]
    again = run("keygen", str(private))
    assert again.exit_code == ExitCode.USAGE and "never overwrites a key" in again.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not a key", "is not an unencrypted PEM private key"),
        (TEST_PUB.read_bytes(), "is not an unencrypted PEM private key"),
    ],
)
def test_a_bad_signing_key_file_is_a_usage_error_naming_it(tmp_path: pathlib.Path, content: bytes, says: str) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(content)
    with pytest.raises(errors.UsageError, match=says):
        signing.load_signer(str(path))


def test_a_device_or_directory_as_a_key_file_is_refused_without_reading_it(tmp_path: pathlib.Path) -> None:
    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(errors.UsageError, match="is not a regular file"):
            signing.load_signer(path)


# --- the controller's key -------------------------------------------------------------------------


def secret_getter(data: dict[str, bytes] | None) -> Any:
    def get(kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        assert (kind, name, namespace) == ("Secret", record_trust.SECRET_NAME, "deployctl-system")
        if data is None:
            return None
        return {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}

    return get


def test_the_controller_signs_with_the_key_of_its_secret_and_trusts_the_listed_public_keys() -> None:
    get = secret_getter({"signing-key.pem": TEST_KEY.read_bytes(), "verify-keys.pem": OTHER_PUB.read_bytes()})
    found = record_trust.from_secret(get, "deployctl-system")
    assert found is not None and found.signer is not None
    assert found.signer.keyid == signing.load_signer(str(TEST_KEY)).keyid
    assert set(found.trusted.keys) == {found.signer.keyid, signing.load_signer(str(OTHER_KEY)).keyid}


def test_without_its_secret_the_controller_has_no_key_and_a_secret_without_the_key_is_refused() -> None:
    assert record_trust.from_secret(secret_getter(None), "deployctl-system") is None
    with pytest.raises(errors.UsageError, match=r"has no key signing-key\.pem: create it with `kubectl create secret"):
        record_trust.from_secret(secret_getter({"other": b"x"}), "deployctl-system")


def test_only_a_role_of_the_controllers_own_namespace_reads_the_signing_secret_by_name() -> None:
    from orchestrator.render import manifests as render

    digest = "sha256:" + "a" * 64
    objects = render.controller("deployctl-system", f"registry.example/deployctl-controller@{digest}")
    grants = [
        (o["kind"], o["metadata"].get("namespace"), rule)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o["rules"]
        if "secrets" in rule["resources"] and rule.get("resourceNames") == [record_trust.SECRET_NAME]
    ]
    assert grants == [
        (
            "Role",
            "deployctl-system",
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [record_trust.SECRET_NAME],
                "verbs": ["get"],
            },
        )
    ]


# --- what the docs say ----------------------------------------------------------------------------


def test_docs_security_names_the_secret_its_keys_the_role_and_the_statement_as_the_code_does() -> None:
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    section = text[text.index("## Signed records") :]
    for name in (
        record_trust.SECRET_NAME,
        record_trust.SECRET_PRIVATE_KEY,
        record_trust.SECRET_VERIFY_KEYS,
        releases.SIGNATURE_KEY,
        attestation.PREDICATE_TYPE,
        signing.PAYLOAD_TYPE,
        "deployctl-controller-signing-key",
    ):
        assert f"`{name}`" in section, name


@pytest.mark.parametrize("command", [("apply",), ("gate",), ("rollback",), ("uninstall",), ("audit", "trust")])
def test_every_command_that_writes_records_reads_the_documented_key_variables(command: tuple[str, ...]) -> None:
    cmd: Any = cli.main
    for word in command:
        cmd = cmd.commands[word]
    envvars = {p.name: p.envvar for p in cmd.params}
    assert "DEPLOYCTL_SIGNING_KEY" in envvars["signing_key"]
    assert "DEPLOYCTL_VERIFY_KEY" in envvars["verify_keys"]


def test_a_key_option_naming_a_device_is_a_usage_error_before_any_cluster_call() -> None:
    result = run("rollback", "llm", "-n", "ns", "--signing-key", "/dev/zero", "--kubeconfig", "/nonexistent")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "the signing key /dev/zero is not a regular file" in result.stderr and "Traceback" not in result.output


def test_a_write_to_a_release_none_of_whose_records_is_trusted_is_refused_not_taken_for_a_first_install() -> None:
    kube = store(2)  # from before signing, no trust step yet
    with pytest.raises(errors.AuditFailed) as refused:
        record_trust.for_write(kube, RELEASE, NS, keys())
    message = refused.value.message
    assert "no record of release 'llama3-70b' in namespace 'inference' is signed by a trusted key" in message
    assert "deployctl audit trust llama3-70b -n inference --signing-key KEY.pem" in message
    assert "Nothing was changed" in message
    trust(kube, 5)
    assert [r.revision for r in record_trust.for_write(kube, RELEASE, NS, keys()).trusted] == [1, 2, 3, 4, 5, 6]


# --- the options reach the library ----------------------------------------------------------------


def test_the_key_options_and_variables_reach_the_pipeline_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[sequence.Options] = []

    def rollback(name: str, namespace: str, to: int | None, options: sequence.Options, report: Any) -> Any:
        seen.append(options)
        return pipeline.Outcome("deployed", name, namespace, "ok", 2)

    monkeypatch.setattr(pipeline, "rollback", rollback)
    by_flag = run("rollback", "llm", "-n", "ns", "--signing-key", str(TEST_KEY), "--verify-key", str(OTHER_PUB))
    by_env = click.testing.CliRunner().invoke(
        cli.main,
        ["rollback", "llm", "-n", "ns"],
        env={"DEPLOYCTL_SIGNING_KEY": str(OTHER_KEY), "DEPLOYCTL_VERIFY_KEY": f"{TEST_PUB}:{OTHER_PUB}"},
    )

    assert by_flag.exit_code == 0 and by_env.exit_code == 0, by_flag.output + by_env.output
    ours, theirs = signing.load_signer(str(TEST_KEY)).keyid, signing.load_signer(str(OTHER_KEY)).keyid
    assert seen[0].keys.signer is not None and seen[0].keys.signer.keyid == ours
    assert set(seen[0].keys.trusted.keys) == {ours, theirs}
    assert seen[1].keys.signer is not None and seen[1].keys.signer.keyid == theirs
    assert set(seen[1].keys.trusted.keys) == {ours, theirs}


def test_audit_verify_key_reaches_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.apply import views

    seen: list[sequence.Options] = []

    def audit_verify(options: sequence.Options, *rest: Any) -> dict[str, Any]:
        seen.append(options)
        return {"ok": True, "records": 1, "head": "0" * 64, "problems": [], "signatures": "checked"}

    monkeypatch.setattr(views, "audit_verify", audit_verify)
    result = run("audit", "verify", "llm", "-n", "ns", "--key", str(TEST_PUB))
    assert result.exit_code == 0, result.output
    assert "every record signed by a trusted key" in result.stdout
    assert list(seen[0].keys.trusted.keys) == [signing.load_signer(str(TEST_KEY)).keyid] and seen[0].keys.signer is None


# --- deployctl audit trust ------------------------------------------------------------------------


class Cluster(FakeKube):
    """The records' fake store, with the verbs `audit trust` adds: who am I, and the release lock."""

    def whoami(self) -> str:
        return "alice"


def audit_trust(monkeypatch: pytest.MonkeyPatch, kube: Cluster, options: sequence.Options) -> dict[str, Any]:
    from orchestrator.apply import views

    monkeypatch.setattr(views, "connect", lambda *_: kube)
    return views.audit_trust(options, RELEASE, NS, None, lambda *_: None)


def test_audit_trust_vouches_for_the_intact_unsigned_chain_and_releases_its_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = Cluster()
    for cm in golden_configmaps(2):
        kube.create(cm)

    result = audit_trust(monkeypatch, kube, sequence.Options(keys=keys()))

    head = history(kube)[4].hash
    assert result == {"revision": 6, "up_to": 5, "head": head, "keyid": signing.load_signer(str(TEST_KEY)).keyid}
    step = history(kube)[5]
    assert (step.outcome, step.actor["user"], step.manifests) == ("trusted", "alice", b"")
    assert [r.revision for r in record_trust.for_write(kube, RELEASE, NS, keys()).trusted] == [1, 2, 3, 4, 5, 6]
    lease = kube.get("Lease", "deployctl-llama3-70b", NS)
    assert lease is not None and not lease["spec"].get("holderIdentity")


def test_audit_trust_never_vouches_for_a_record_whose_signature_does_not_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = Cluster()
    for cm in golden_configmaps(3)[:4]:
        kube.create(cm)
    forged = forge(kube)
    cm = kube.objects[("ConfigMap", NS, releases.record_name(RELEASE, forged.revision))]
    cm["data"][releases.SIGNATURE_KEY] = golden_configmaps(3)[0]["data"][releases.SIGNATURE_KEY]  # moved
    creates = kube.creates

    with pytest.raises(errors.AuditFailed, match=r"not vouched for: revision 5: its signature covers another"):
        audit_trust(monkeypatch, kube, sequence.Options(keys=keys()))
    assert kube.creates == creates + 1  # the lock's Lease; no record


def test_audit_trust_needs_a_signing_key() -> None:
    from orchestrator.apply import views

    with pytest.raises(errors.UsageError, match="give --signing-key"):
        views.audit_trust(sequence.Options(keys=keys(None, TEST_PUB)), RELEASE, NS, None, lambda *_: None)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_key_file_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(TEST_KEY.read_bytes())
    path.chmod(0)
    with pytest.raises(errors.UsageError, match="cannot read the signing key"):
        signing.load_signer(str(path))


def test_a_fifo_as_a_key_file_is_refused_without_blocking(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo)
    with pytest.raises(errors.UsageError, match="is not a regular file"):
        signing.load_public_keys([str(fifo)])
