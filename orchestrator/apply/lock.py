"""One apply at a time per release: a coordination.k8s.io Lease held for the whole operation.

The Lease lives next to the release (``deployctl-<release>`` in its namespace). A second apply
of the same release fails at once naming the holder; a lock left by a killed process is taken
over once it has not been renewed for its duration, with a warning. A renewal thread keeps the
lock alive through multi-minute model loads.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from orchestrator import errors
from orchestrator.kube import Kube
from orchestrator.kube import status as kube_status

DEFAULT_TTL_SECONDS = 60


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: object) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_name(release: str) -> str:
    return f"deployctl-{release}"


class ReleaseLock:
    """``with ReleaseLock(kube, ns, release, actor) as lock: ...`` — raises errors.Locked when held."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        release: str,
        actor: str,
        *,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        warn: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self._kube = kube
        self.namespace = namespace
        self.release = release
        self.ttl = max(5, ttl_seconds)
        self.identity = f"{actor}@{socket.gethostname()}/pid-{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._warn = warn
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost: str | None = None  # set when renewal found someone else holding the lease
        self._renewed_at = time.monotonic()

    def __enter__(self) -> ReleaseLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_lock()

    def acquire(self) -> None:
        name = lease_name(self.release)
        now = _now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.ttl,
            "acquireTime": _micro(now),
            "renewTime": _micro(now),
        }
        current = self._kube.get("Lease", name, self.namespace)
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {
                        "deployctl.dev/release": self.release,
                        "app.kubernetes.io/managed-by": "deployctl",
                    },
                },
                "spec": spec,
            }
            try:
                self._kube.create(body)
            except errors.Conflict:
                current = self._kube.get("Lease", name, self.namespace)
                if current is None:
                    raise errors.Locked(f"release {self.release} is being locked by someone else; retry") from None
                self._raise_if_held(current)
                self._take_over(current, spec)
        else:
            self._raise_if_held(current)
            self._take_over(current, spec)
        self._renewed_at = time.monotonic()
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renew", daemon=True)
        self._renewer.start()

    def _raise_if_held(self, lease: Mapping[str, object]) -> None:
        spec = kube_status.mapping(lease.get("spec"))
        holder = spec.get("holderIdentity")
        if not holder:
            return
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = kube_status.number(spec.get("leaseDurationSeconds")) or DEFAULT_TTL_SECONDS
        if renewed is None or renewed + dt.timedelta(seconds=duration) <= _now():
            self._warn(
                f"taking over the lock of release {self.release} from {holder}: it was not renewed for "
                f"{duration}s (a killed or crashed deployctl); check the release with `deployctl status`"
            )
            return
        since = spec.get("acquireTime") or spec.get("renewTime")
        expires = (renewed + dt.timedelta(seconds=duration)).strftime("%H:%M:%S UTC")
        raise errors.Locked(
            f"release {self.release} in namespace {self.namespace} is locked by {holder} since {since} "
            f"(another apply, gate or rollback is running). Wait for it to finish; if that process was killed, "
            f"the lock expires at {expires} and can then be taken over"
        )

    def _take_over(self, lease: Mapping[str, object], spec: Mapping[str, object]) -> None:
        lease = {**lease, "spec": {**kube_status.mapping(lease.get("spec")), **spec}}
        try:
            self._kube.replace(lease)  # guarded by resourceVersion: one winner
        except errors.Conflict:
            raise errors.Locked(
                f"release {self.release} was locked by another deployctl at the same moment; retry later"
            ) from None

    def _renew_loop(self) -> None:
        interval = max(1.0, self.ttl / 3)
        while not self._stop.wait(interval):
            try:
                self._renew()
            except errors.DeployctlError:
                continue  # a blip (API restart): try again next tick; the TTL covers two misses

    def _renew(self) -> None:
        current = self._kube.get("Lease", lease_name(self.release), self.namespace)
        if current is None or (current.get("spec") or {}).get("holderIdentity") != self.identity:
            holder = (current or {}).get("spec", {}).get("holderIdentity")
            self.lost = f"the lock of release {self.release} was taken by {holder or 'nobody'}"
            self._stop.set()
            return
        current["spec"]["renewTime"] = _micro(_now())
        self._kube.replace(current)
        self._renewed_at = time.monotonic()

    def lost_reason(self) -> str | None:
        """Why this process may no longer act for the release, or None while it holds the lock.

        Lost when renewal found another holder, or when no renewal succeeded for a whole TTL:
        another deployctl may then take the lock over as left by a killed process.
        """
        if self.lost is not None:
            return self.lost
        silent = time.monotonic() - self._renewed_at
        if silent > self.ttl:
            return f"the lock of release {self.release} was not renewed for {silent:.0f}s (TTL {self.ttl}s)"
        return None

    def release_lock(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        current = self._kube.get("Lease", lease_name(self.release), self.namespace)
        if current is None or (current.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        current["spec"]["holderIdentity"] = None
        current["spec"].pop("renewTime", None)
        # A conflict means it was renewed or taken concurrently; the holder check above makes that rare.
        with contextlib.suppress(errors.Conflict):
            self._kube.replace(current)
