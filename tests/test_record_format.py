"""Record formats: golden records of every format this deployctl reads, and the refusals of what it does not.

tests/data/records/format-N/ holds records and an audit export written by the deployctl that
wrote format N (format 1: deployctl 0.1.0, git 6175418), made by scripts/gen_record_fixtures.py
(tests/data/records/README.md). They are loaded here as the API server would hand them back.
"""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import click.testing
import pytest
from test_releases import NOW, FakeKube, manifests

import orchestrator
from orchestrator import errors
from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.records import audit, encoding, releases, revisions, writer
from orchestrator.records import format as record_format

GOLDEN = pathlib.Path(__file__).resolve().parent / "data" / "records"
NEWER = releases.RECORD_FORMAT + 1  # a format no deployctl writes yet
RELEASE, NS = "llama3-70b", "inference"


def golden_configmaps(fmt: int) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((GOLDEN / f"format-{fmt}").glob("deployctl.*.json"))]


def golden_export(fmt: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / f"format-{fmt}" / "export.json").read_text())
    return doc


def store(fmt: int) -> FakeKube:
    kube = FakeKube()
    for cm in golden_configmaps(fmt):
        kube.create(cm)
    return kube


def history(kube: FakeKube) -> list[releases.Record]:
    return releases.load_history(kube, RELEASE, NS)


def plant(kube: FakeKube, revision: int, fmt: int | None, *, label: str | None = None, **fields: Any) -> str:
    """A record ConfigMap chained onto the newest one, naming ``fmt`` in record.json (None: no field)
    and ``label`` in its label (None: no label), with ``fields`` added; its hash is correct."""
    newest = golden_configmaps(2)[-1]
    cm = copy.deepcopy(newest)
    body = json.loads(cm["data"]["record.json"])
    body.pop("format")
    body |= {"revision": revision, "prev_hash": newest["metadata"]["annotations"][releases.ANNOTATION_HASH], **fields}
    if fmt is not None:
        body["format"] = fmt
    text = encoding.canonical_json(body)
    name = releases.record_name(RELEASE, revision)
    labels = cm["metadata"]["labels"]
    labels[releases.LABEL_REVISION] = str(revision)
    labels.pop(releases.LABEL_FORMAT)
    if label is not None:
        labels[releases.LABEL_FORMAT] = label
    cm["metadata"] |= {"name": name, "annotations": {releases.ANNOTATION_HASH: encoding.sha256(text)}}
    cm["data"]["record.json"] = text.decode()
    kube.create(cm)
    return name


def run(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl")


# --- the golden sets ------------------------------------------------------------------------------


def test_there_is_one_golden_set_per_format_read_and_the_newest_has_every_field() -> None:
    sets = {int(p.name.removeprefix("format-")) for p in GOLDEN.glob("format-*")}
    assert sets == set(releases.RECORD_FORMATS_READ)
    assert max(releases.RECORD_FORMATS_READ) == releases.RECORD_FORMAT
    # A new field of record.json is a new format (docs/record-format.md): this fails until both move.
    assert record_format.FIELDS[releases.RECORD_FORMAT] == set(releases.RecordBody.model_fields)


@pytest.mark.parametrize("fmt", releases.RECORD_FORMATS_READ)
def test_golden_records_load_verify_and_give_the_live_revision_and_rollback_target(fmt: int) -> None:
    records = history(store(fmt))

    assert [(r.revision, r.outcome, r.format_version) for r in records] == [
        (1, "deployed", fmt),
        (2, "deployed", fmt),
        (3, "failed", fmt),
        (4, "deployed", fmt),
        (5, "uninstalled", fmt),
    ]
    assert audit.verify(records, release=RELEASE, namespace=NS) == []
    # Before the uninstall: 4 is live (the rollback to 2 after 3 failed), and a rollback goes
    # back before 2's bytes, to 1.
    before = records[:4]
    assert revisions.live(before) is before[3]
    target = revisions.rollback_target(before)
    assert target is not None and target.revision == 1
    # After it: nothing is live, and a rollback restores what was live when it ran.
    assert revisions.live(records) is None
    target = revisions.rollback_target(records)
    assert target is not None and target.revision == 4
    assert [row["format"] for row in revisions.summaries(records)] == [fmt] * 5
    assert records[1].planner_check()["kv_tokens_observed"] == 412_320


@pytest.mark.parametrize("fmt", releases.RECORD_FORMATS_READ)
def test_a_golden_record_is_stored_again_byte_for_byte(fmt: int) -> None:
    # A format 1 record keeps its hash and gains no label: reading never rewrites history.
    for cm in golden_configmaps(fmt):
        assert releases.to_configmap(releases.from_configmap(cm)) == cm
    assert all((releases.LABEL_FORMAT in cm["metadata"]["labels"]) == (fmt > 1) for cm in golden_configmaps(fmt))


@pytest.mark.parametrize("fmt", releases.RECORD_FORMATS_READ)
def test_golden_export_names_its_format_and_verifies_against_the_golden_records(fmt: int) -> None:
    doc = golden_export(fmt)
    assert doc.get("format", 1) == fmt
    assert ("format" in doc) == (fmt > 1)
    assert audit.verify_export(doc) == []
    assert audit.compare_with_export(history(store(fmt)), doc) == []


def test_a_new_revision_after_format_1_records_is_the_current_format_chained_to_them() -> None:
    kube = store(1)
    old = history(kube)

    new = writer.append(
        kube,
        writer.NewRecord(
            writer.Draft(
                RELEASE,
                NS,
                manifests=old[0].manifests,
                profile_text=old[0].profile,
                plan=old[0].plan,
                model=old[0].model,
                image=old[0].image,
                profile_hash=old[0].profile_hash,
                actor={"user": "alice", "ci": {}},
            ),
            outcome="deployed",
            description="rollback to 1",
            rollback_of=1,
        ),
        now=NOW,
    )

    fmt = releases.RECORD_FORMAT
    assert (new.revision, new.format, new.prev_hash) == (6, fmt, old[-1].hash)
    assert json.loads(kube.get("ConfigMap", "deployctl.llama3-70b.v6", NS)["data"]["record.json"])["format"] == fmt
    records = history(kube)
    assert audit.verify(records, release=RELEASE, namespace=NS) == []
    export = json.loads(json.dumps(audit.export(records, release=RELEASE, namespace=NS, now=NOW)))
    assert export["format"] == fmt
    assert ["format" in e for e in export["records"]] == [False] * 5 + [True]
    assert audit.verify_export(export) == []


# --- a newer format -------------------------------------------------------------------------------


@pytest.mark.parametrize("label", [str(NEWER), None], ids=["labelled", "only-in-record.json"])
def test_a_record_in_a_newer_format_is_refused_naming_both_versions_before_its_fields(label: str | None) -> None:
    kube = store(2)
    # A field this format does not know: an older deployctl must never show it as a validation error.
    name = plant(kube, 6, NEWER, label=label, witness={"alg": "ed25519", "sig": "AAAA"})
    creates = kube.creates

    with pytest.raises(errors.NewerRecordFormat) as refused:
        history(kube)
    with pytest.raises(errors.NewerRecordFormat):
        writer.append(
            kube,
            writer.NewRecord(
                writer.Draft(
                    RELEASE,
                    NS,
                    manifests=manifests("v9"),
                    profile_text="",
                    plan=None,
                    model=releases.ModelRef(name="m", revision=None),
                    image="i",
                    profile_hash="h",
                    actor={},
                ),
                outcome="deployed",
                description="upgrade",
            ),
        )

    message = refused.value.message
    assert refused.value.exit_code == ExitCode.AUDIT_FAILED == 9
    assert message.startswith(
        f"release {RELEASE} revision 6 in namespace {NS} (ConfigMap {name}) is record format {NEWER}; "
        f"this deployctl {orchestrator.__version__} reads formats 1-{NEWER - 1}: "
        f"upgrade deployctl to a version that reads format {NEWER}"
    )
    assert "docs/upgrading.md" in message
    assert "witness" not in message and "validation error" not in message.lower()
    assert kube.creates == creates, "a record was written after a newer one"


def test_a_newer_format_label_is_refused_even_when_the_body_is_not_json() -> None:
    kube = store(1)
    name = plant(kube, 6, NEWER, label=str(NEWER))
    cm = kube.objects[("ConfigMap", NS, name)]
    cm["data"]["record.json"] = "<a format this deployctl cannot imagine>"

    with pytest.raises(errors.NewerRecordFormat, match=f"is record format {NEWER}"):
        history(kube)


# --- malformed formats and unknown fields ---------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "label", "says"),
    [
        (None, "2", "label deployctl.dev/record-format says format 2 but record.json names no format"),
        (2, None, "label deployctl.dev/record-format says format (none) but record.json names 2"),
        ("2", "2", "record.json names format '2', which is not a record format"),
        (True, "2", "record.json names format True, which is not a record format"),
        (1, None, "record.json names format 1, which is not a record format"),
        (2, "two", "its label deployctl.dev/record-format is 'two', not a format number"),
        (2, "0", "its label deployctl.dev/record-format names format 0"),
    ],
)
def test_a_missing_or_malformed_format_is_an_unreadable_record_exit_9(fmt: Any, label: str | None, says: str) -> None:
    kube = store(2)
    name = plant(kube, 6, fmt, label=label)

    with pytest.raises(errors.AuditFailed) as refused:
        history(kube)

    assert type(refused.value) is errors.AuditFailed and refused.value.exit_code == 9
    assert f"unreadable records: {name} (" in refused.value.message
    assert says in refused.value.message


@pytest.mark.parametrize("fmt", releases.RECORD_FORMATS_READ)
def test_a_field_its_format_does_not_have_is_refused_naming_record_and_field(fmt: int) -> None:
    kube = store(fmt)
    plant(kube, 6, fmt if fmt > 1 else None, label=str(fmt) if fmt > 1 else None, reviewer="mallory")

    with pytest.raises(errors.AuditFailed) as refused:
        history(kube)

    assert (
        f"deployctl.llama3-70b.v6 (record.json has a field 'reviewer' that record format {fmt} does not have; "
        "every new field is a new format, so it was added outside deployctl)"
    ) in refused.value.message


def test_a_record_of_the_wrong_shape_is_described_in_one_clause_per_field() -> None:
    kube = store(2)
    plant(kube, 6, 2, label="2", rollback_of="four")

    with pytest.raises(errors.AuditFailed, match=r"does not fit record format 2: rollback_of: Input should be"):
        history(kube)


# --- exports --------------------------------------------------------------------------------------


def write(tmp_path: pathlib.Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_audit_verify_file_refuses_an_export_of_a_newer_format_exit_9(tmp_path: pathlib.Path) -> None:
    doc = golden_export(2) | {"format": NEWER}
    path = write(tmp_path, doc)

    result = run("audit", "verify", "--file", path)

    assert result.exit_code == ExitCode.AUDIT_FAILED, result.output
    assert (
        f"audit export {path} of release {RELEASE} in namespace {NS} is record format {NEWER}; "
        f"this deployctl {orchestrator.__version__} reads formats 1-{NEWER - 1}: upgrade deployctl"
    ) in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("fmt", releases.RECORD_FORMATS_READ)
def test_audit_verify_file_passes_each_golden_export(fmt: int, tmp_path: pathlib.Path) -> None:
    result = run("audit", "verify", "--file", write(tmp_path, golden_export(fmt)), "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def test_an_export_whose_format_is_not_a_number_is_refused_exit_9(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, golden_export(2) | {"format": "2"})

    result = run("audit", "verify", "--file", path)

    assert result.exit_code == ExitCode.AUDIT_FAILED, result.output
    assert f"audit export {path} of release {RELEASE} in namespace {NS} is unreadable: the export names format '2'" in (
        result.stderr
    )


def test_a_record_newer_than_its_export_is_an_unreadable_entry_not_a_reason_to_upgrade() -> None:
    # A deployctl that writes format 3 records writes format 3 exports: an entry newer than its
    # export was changed afterwards, which a newer deployctl would report just the same.
    doc = golden_export(2)
    doc["records"][4]["format"] = 3

    problems = audit.verify_export(doc)

    assert [(p.revision, p.code) for p in problems] == [(5, "unreadable"), (None, "head")]
    assert "it is record format 3, newer than the export's format 2" in problems[0].message


def test_a_record_newer_than_its_export_and_an_unknown_field_are_unreadable_entries() -> None:
    doc = golden_export(1)
    doc["records"][1]["format"] = 2
    doc["records"][2]["reviewer"] = "mallory"

    problems = audit.verify_export(doc)

    assert [(p.revision, p.code) for p in problems if p.code == "unreadable"] == [(2, "unreadable"), (3, "unreadable")]
    messages = " ".join(p.message for p in problems)
    assert "it is record format 2, newer than the export's format 1" in messages
    assert "'reviewer' that record format 1 does not have" in messages
