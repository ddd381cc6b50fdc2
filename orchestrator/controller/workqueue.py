"""A keyed work queue for the controller's workers: each key is worked on by one worker at a time.

As client-go's workqueue: a key added while it waits is queued once; a key added while a worker
holds it is queued again when that worker is done, so the newest state is always looked at, never
twice at once. A slow key (a model loading for half an hour) then holds one worker, and the other
keys go to the others.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[K] = collections.deque()
        self._waiting: set[K] = set()  # in _queue
        self._active: set[K] = set()  # held by a worker
        self._again: set[K] = set()  # added while held: queued when done
        self._closed = False

    def add(self, key: K) -> None:
        with self._cond:
            if key in self._active:
                self._again.add(key)
            elif key not in self._waiting:
                self._waiting.add(key)
                self._queue.append(key)
                self._cond.notify()

    def get(self, timeout: float) -> K | None:
        """The next key, now held by the caller until ``done``; None after ``timeout`` or once closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue or self._closed, timeout) or self._closed:
                return None
            key = self._queue.popleft()
            self._waiting.discard(key)
            self._active.add(key)
            return key

    def done(self, key: K) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._again:
                self._again.discard(key)
                self.add(key)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def active(self) -> set[K]:
        with self._cond:
            return set(self._active)


def start_workers(
    queue: WorkQueue[K], count: int, work: Callable[[K], None], stop: threading.Event, name: str
) -> list[threading.Thread]:
    """``count`` daemon threads that take keys from ``queue`` and call ``work`` until ``stop`` is set."""

    def run() -> None:
        while not stop.is_set():
            key = queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                work(key)
            finally:
                queue.done(key)

    threads = [threading.Thread(target=run, name=f"{name}-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads
