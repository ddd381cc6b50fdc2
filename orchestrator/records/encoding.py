"""The bytes of a release record: canonical JSON, its sha256, and the deterministic gzip its manifests are stored in.

The same value must always give the same bytes, anywhere: the hash chain and the signatures cover
these bytes, so every module that hashes or signs a record encodes it here. Records are read back
as plain JSON (``JsonObject``), whose values are narrowed where they are used (``object_at``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import zlib
from collections.abc import Mapping

# A JSON object as json.loads (or the API server) gives it: each reader narrows the values it uses.
JsonObject = dict[str, object]

# A release's manifests are tens of KiB; a ConfigMap holds at most 1 MiB, which gzip can inflate a
# thousandfold. Past this the record is refused rather than inflated (a bomb from a namespace editor).
MANIFESTS_MAX_BYTES = 64 << 20


# Longer than any start or step (a week): a figure beyond it was not measured, someone wrote it.
MOST_SECONDS = 7 * 24 * 3600.0


def seconds(value: object) -> float | None:
    """A JSON value as seconds when it is a finite number from 0 to MOST_SECONDS, else None: the one check
    every duration read from the cluster (events, logs, stored records) passes before it is used or shown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return as_float if math.isfinite(as_float) and 0 <= as_float <= MOST_SECONDS else None


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the same value always gives the same bytes to hash.

    NaN and infinity are refused: they are not JSON, and other tools could not read the record.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip: no mtime, no file name and a fixed OS byte (``gzip.compress`` in 3.11
    takes the OS byte from zlib), so the same manifests give the same stored bytes anywhere."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(data)
    return buffer.getvalue()


def gunzip(packed: bytes) -> bytes:
    """The manifests stored as ``packed``; ValueError when they inflate past MANIFESTS_MAX_BYTES or are cut off."""
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # the gzip container, as gzip.compress writes it
    out = inflate.decompress(packed, MANIFESTS_MAX_BYTES + 1)
    if len(out) > MANIFESTS_MAX_BYTES or inflate.unconsumed_tail:
        raise ValueError(f"its manifests inflate to more than {MANIFESTS_MAX_BYTES:,} bytes")
    if not inflate.eof:
        raise ValueError("its manifests are a cut-off gzip stream")
    return out


def object_at(value: Mapping[str, object], key: str) -> Mapping[str, object]:
    """``value[key]`` when it is a JSON object, else an empty one: for optional parts of a ConfigMap
    (``metadata.labels``, ``data``) that a reader treats as empty when missing or malformed."""
    found = value.get(key)
    return found if isinstance(found, Mapping) else {}
