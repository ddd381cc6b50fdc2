"""Record formats: which format a release record or audit export names, whether this deployctl
reads it, and the fields each format has (docs/record-format.md).

Format 1 is deployctl 0.1.0's record, which names no format. Every later format names itself: in
``record.json`` (``"format": 2``, inside what the hash covers) and in the ConfigMap's label
``deployctl.dev/record-format``, so a reader sees it before parsing the body. An audit export
names the format of the deployctl that wrote it the same way (``"format"`` at its top).

The policy for fields: every new field of ``record.json`` is a new format. So within a format
every field is known, and a field that its format does not define was put there outside
deployctl: it is refused as corruption, naming the record and the field. An older deployctl meets
a newer record's fields only behind its format number, which it refuses before reading any
field, with a message that says which deployctl to install instead of a validation error.
"""

from __future__ import annotations

from collections.abc import Mapping

import orchestrator
from orchestrator import errors

# The format this deployctl writes, and every format it reads (releases re-exports both).
RECORD_FORMAT = 5
RECORD_FORMATS_READ = (1, 2, 3, 4, 5)
FORMAT_KEY = "format"

# The fields of record.json in each format. A new field is a new format: add a set here, bump
# RECORD_FORMAT, and add a golden set under tests/data/records/ (tests hold these equal to
# releases.RecordBody's fields).
_FORMAT_1_FIELDS = frozenset(
    {
        "release",
        "namespace",
        "revision",
        "outcome",
        "description",
        "timestamp",
        "actor",
        "model",
        "image",
        "profile_hash",
        "profile",
        "plan",
        "gate",
        "failure",
        "rollback_of",
        "manifests_sha256",
        "prev_hash",
        "observed",
        "deleted",
    }
)
# Format 3 adds the signature (a DSSE envelope beside record.json, in the ConfigMap key
# record.dsse.json, outside what the hash covers) and ``trust``, set only on the record of a trust
# step (outcome ``trusted``, docs/security.md#signed-records). Format 4 adds ``time_to_serving``: how long
# the revision took from the write to its first token, by step and by pod (docs/time-to-serving.md).
# Format 5 adds ``canary``: the steps of rollout.canary and what each measured (docs/canary.md).
FIELDS: dict[int, frozenset[str]] = {
    1: _FORMAT_1_FIELDS,
    2: _FORMAT_1_FIELDS | {FORMAT_KEY},
    3: _FORMAT_1_FIELDS | {FORMAT_KEY, "trust"},
    4: _FORMAT_1_FIELDS | {FORMAT_KEY, "trust", "time_to_serving"},
    5: _FORMAT_1_FIELDS | {FORMAT_KEY, "trust", "time_to_serving", "canary"},
}
# The first format that is signed, and the first whose records may be a trust step.
SIGNED_FORMAT = 3


def readable() -> str:
    """The formats this deployctl reads, for messages: ``1-2``."""
    return f"{min(RECORD_FORMATS_READ)}-{max(RECORD_FORMATS_READ)}"


def _named(value: object, where: str) -> int:
    # Format 1 names no format, so a named format starts at 2; a bool is not a number here, even
    # though Python counts True as 1.
    if type(value) is not int or value < 2:
        raise ValueError(
            f"{where} names format {value!r}, which is not a record format: formats are whole numbers "
            "from 2 up (format 1, deployctl 0.1.0's, names none)"
        )
    return value


def of_body(body: Mapping[str, object], where: str = "record.json") -> int:
    """The format a parsed record (or export) names: 1 when it names none; ValueError when malformed."""
    if FORMAT_KEY not in body:
        return 1
    return _named(body[FORMAT_KEY], where)


def of_label(value: object) -> int | None:
    """The format a record ConfigMap's label names (a label is a string); None without the label."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.isdecimal() or not value.isascii():
        raise ValueError(f"its label deployctl.dev/record-format is {value!r}, not a format number")
    return _named(int(value), "its label deployctl.dev/record-format")


def check_readable(found: int, what: str) -> None:
    """Refuse ``what`` (a record, an export) in a format this deployctl does not read."""
    if found in RECORD_FORMATS_READ:
        return
    raise errors.NewerRecordFormat(
        f"{what} is record format {found}; this deployctl {orchestrator.__version__} reads formats "
        f"{readable()}: upgrade deployctl to a version that reads format {found} (docs/upgrading.md). "
        "Nothing was changed"
    )


def check_fields(body: Mapping[str, object], found: int) -> None:
    """Refuse fields that format ``found`` does not define (the policy in the module doc)."""
    unknown = sorted(set(body) - FIELDS[found])
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise ValueError(
            f"record.json has {'a field' if len(unknown) == 1 else 'fields'} {names} that record format "
            f"{found} does not have; every new field is a new format, so it was added outside deployctl"
        )
