# deployctl's warm-up: run as `python3 -c` in the engine's own image, on one target node, before the
# GPU pods start (orchestrator/apply/warmup.py). Standard library only: the image has Python, nothing more
# is assumed. Arguments: the weights directory, the manifest file to report ("" for none), "1" to hash
# every file (model.verify), the compile cache directory to test for writing ("" for none).
#
# It reads every byte of the weights once, which leaves them in the node's page cache for the engine,
# and hashes them in the same pass (files in parallel: hashlib releases the GIL on large buffers). It
# prints one line, "deployctl-warmup: " and a JSON report, which deployctl reads from the pod's log and
# judges; the pod itself decides nothing. A .git directory is skipped (a clone holds every blob twice).
from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import json
import os
import sys
import tempfile
import time

CHUNK = 16 << 20
MANIFEST_LIMIT = 16 << 20
SKIPPED_DIRS = {".git"}


def read(path: str, digest: bool) -> tuple[int, str | None]:
    h = hashlib.sha256() if digest else None
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            size += len(block)
            if h is not None:
                h.update(block)
    return size, (h.hexdigest() if h is not None else None)


def files_under(root: str) -> list[str]:
    found: list[str] = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(names):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                found.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return found


def writable(directory: str) -> dict[str, object]:
    # A file of its own (pods on one claim all run as PID 1), removed again whoever else is there.
    try:
        handle, probe = tempfile.mkstemp(prefix=".deployctl-warmup-", dir=directory)
        os.close(handle)
        os.remove(probe)
    except OSError as e:
        return {"path": directory, "writable": False, "error": f"{type(e).__name__}: {e.strerror or e}"}
    return {"path": directory, "writable": True, "error": None}


def main(root: str, manifest: str, digest: bool, cache: str) -> int:
    started = time.monotonic()
    files: dict[str, str | None] = {}
    errors: list[str] = []
    total = 0
    report: dict[str, object] = {"files": files, "errors": errors, "manifest": None, "cache": None}
    if cache:
        report["cache"] = writable(cache)
    try:
        names = files_under(root)
    except OSError as e:
        names = []
        errors.append(f"cannot list {root}: {e.strerror or e}")
    if not names:
        errors.append(f"no files under {root}")
    workers = min(8, (os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = {name: pool.submit(read, os.path.join(root, name), digest) for name in names}
        for name, job in jobs.items():
            try:
                size, hexdigest = job.result()
            except OSError as e:
                errors.append(f"cannot read {name}: {e.strerror or e}")
                continue
            total += size
            files[name] = hexdigest
    if manifest:
        path = os.path.join(root, manifest)
        try:
            with open(path, "rb") as f:
                data = f.read(MANIFEST_LIMIT + 1)
            report["manifest"] = base64.b64encode(data).decode()
        except OSError as e:
            errors.append(f"cannot read the manifest {manifest}: {e.strerror or e}")
    report["bytes"] = total
    report["seconds"] = round(time.monotonic() - started, 3)
    print("deployctl-warmup: " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]))
