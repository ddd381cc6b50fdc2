"""Ending `deployctl bench` early with a report: the first SIGINT or SIGTERM stops new requests.

A benchmark run as background traffic (a canary's live load, a soak beside a rollout) is ended by
whoever started it, not by its ``--duration``. Killing it would lose what it measured, so the first
signal only stops sending: the requests in flight finish and the report says the run was stopped,
when, and by which signal. A second signal is not caught: Ctrl-C twice still ends the run at once.

With several client processes the parent takes the signal and passes SIGTERM on to each shard,
which stops the same way; a second signal to the parent kills the shards. Only the command line
asks for this: the smoke gate inside `apply` keeps the apply's own signal handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.process
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop:
    """Set once a stop signal arrived: ``signal_name`` says which (None until then)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal_name: str | None = None

    def is_set(self) -> bool:
        return self.event.is_set()

    def request(self, signal_name: str) -> None:
        if self.signal_name is None:
            self.signal_name = signal_name
        self.event.set()


@contextlib.contextmanager
def on_signals(stop: Stop, *, keep: bool = False) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop`` (in the running loop's thread, the main one).

    The first signal takes the handlers away again unless ``keep`` (a shard process, whose parent
    decides when to kill it), so a second one acts as if nothing had been caught.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only: nothing to catch here
        return
    loop = asyncio.get_running_loop()

    def caught(sig: signal.Signals) -> None:
        stop.request(sig.name)
        if not keep:
            for each in SIGNALS:
                loop.remove_signal_handler(each)

    for sig in SIGNALS:
        loop.add_signal_handler(sig, caught, sig)
    try:
        yield
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)


@contextlib.contextmanager
def forwarded_to(procs: Sequence[multiprocessing.process.BaseProcess], stopped: list[str]) -> Iterator[None]:
    """In the parent of shard processes: the first signal is passed on as SIGTERM (and its name
    appended to ``stopped``); a second kills the shards and interrupts the parent."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def caught(signum: int, frame: FrameType | None) -> None:
        if stopped:
            for proc in procs:
                proc.kill()
            raise KeyboardInterrupt
        stopped.append(signal.Signals(signum).name)
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                proc.terminate()  # SIGTERM: the shard's on_signals(keep=True) stops it with a result

    previous = {sig: signal.signal(sig, caught) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
