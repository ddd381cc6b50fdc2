"""Wait for a release's pods to be gone: what `deployctl uninstall` does after its deletes.

The pods are read once, then watched, until none of the release is left (their GPUs are free), the
deadline runs out or the caller's lock is lost; while it waits, a line says which pods remain.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from collections.abc import Sequence

from orchestrator import conventions
from orchestrator.apply import watching
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status

PROGRESS_EVERY_SECONDS = 5.0


def wait(
    kube: Kube,
    namespace: str,
    name: str,
    wait_for: watching.Wait,
) -> list[str]:
    """Read the release's pods once, then watch them until none is left (their GPUs are free);
    the names still there when ``wait_for.timeout`` ran out (or the lock was lost), else empty."""
    timeout, progress, abort = wait_for.timeout, wait_for.progress, wait_for.abort
    start = time.monotonic()
    events: queue.Queue[watching.Event] = queue.Queue()
    stop = threading.Event()
    watcher = watching.Watcher(kube, "Pod", namespace, events, stop, labels=f"{conventions.RELEASE_LABEL}={name}")
    watcher.start()
    pods: dict[str, kube_status.Object] = {}
    synced, said, said_at = False, "", 0.0
    try:
        while True:
            if synced and not pods:
                return []
            elapsed = time.monotonic() - start
            if elapsed >= timeout or abort() is not None:
                return sorted(pods)
            try:
                _, kind, obj = events.get(timeout=min(1.0, max(0.01, timeout - elapsed)))
            except queue.Empty:
                kind, obj = "", {}
            if kind in ("SYNC", "DELETED", "ADDED", "MODIFIED"):
                watching.store_event(pods, kind, obj)
                synced = synced or kind == "SYNC"
            if synced and pods:
                text = describe_pods(list(pods.values()))
                if text != said or time.monotonic() - said_at >= PROGRESS_EVERY_SECONDS:
                    progress(text)
                    said, said_at = text, time.monotonic()
    finally:
        stop.set()


def describe_pods(pods: Sequence[kube_status.Object], now: datetime.datetime | None = None) -> str:
    """``waiting for 2 pods to terminate: a (terminating 12s), b (Running)``, four named at most."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    parts = []
    for view in sorted((kube_status.Pod.from_object(p) for p in pods), key=lambda v: v.meta.name)[:4]:
        since = view.meta.deletion_timestamp
        if since:
            try:
                seconds = (now - datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds()
                state = f"terminating {max(0, int(seconds))}s"
            except ValueError:
                state = "terminating"
        else:
            state = view.phase or "Pending"
        parts.append(f"{view.meta.name} ({state})")
    more = f", and {len(pods) - 4} more" if len(pods) > 4 else ""
    return f"waiting for {len(pods)} pod{'s' if len(pods) != 1 else ''} to terminate: {', '.join(parts)}{more}"
