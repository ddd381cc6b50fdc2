"""How an apply, gate or rollback ended, and the one mapping from that ending to its exit code.

The sequences in ``orchestrator.apply.pipeline`` only say what happened (a result and, when something
failed, its class and stage); ``exit_code`` below decides what a pipeline sees, so no two places
can disagree about it (docs/cli.md lists the codes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Literal, TypedDict

from orchestrator.errors import ExitCode
from orchestrator.gate import verdict as gate

Result = Literal[
    "deployed",  # the revision passed and is live
    "dry_run",  # --dry-run: nothing was written
    "refused",  # preflight refused before the first write
    "rolled_back",  # the revision failed and the last good release (or nothing) is live again
    "left_failed",  # the revision failed and was left in place (--no-rollback)
    "rollback_failed",  # the revision failed and restoring failed too: a person must look
    "gate_failed",  # GitOps gate: the synced revision failed; in GitOps the fix is a revert in git
    "uninstalled",  # `deployctl uninstall`: the release's objects are deleted and that is recorded
    "already_uninstalled",  # uninstall of a release with nothing left to delete: nothing was written
    "uninstall_failed",  # uninstall could not delete everything, or its pods outlived --timeout
]

# Failure classes that are the cluster's (or the lock's) doing, not the revision's: exit 4, even
# when the revision was undone so that nothing is left half-applied.
CLUSTER_CLASSES = frozenset({"cluster_error", "lock_lost"})
# deployctl itself failed after the first write (a bug): the revision is undone and recorded; 5.
INTERNAL_CLASS = "internal_error"
GATE_STAGES = frozenset({"health", "smoke", "canary"})  # canary: its analysis of live traffic


@dataclasses.dataclass(frozen=True)
class Failure:
    cls: str  # a rollout failure class (docs/troubleshooting.md), slo_failed, gate_error, …
    message: str
    stage: str  # preflight | apply | rollout | health | smoke | canary | record | sync

    def to_json(self) -> dict[str, str]:
        return {"class": self.cls, "message": self.message, "stage": self.stage}

    def to_record(self) -> dict[str, str]:
        return {"class": self.cls, "message": self.message}


def exit_code(result: Result, failure: Failure | None) -> ExitCode:
    """The exit code of every ending; the only place that decides one."""
    if result in ("deployed", "dry_run", "uninstalled", "already_uninstalled"):
        return ExitCode.OK
    if result == "rollback_failed":
        return ExitCode.ROLLBACK_FAILED
    if result == "gate_failed":
        return ExitCode.GATE_FAILED
    if failure is not None and failure.cls in CLUSTER_CLASSES:
        return ExitCode.CLUSTER_ERROR
    if failure is not None and failure.cls == INTERNAL_CLASS:
        return ExitCode.ROLLOUT_FAILED  # whatever step it hit: the gate did not judge the revision
    if result == "rolled_back" and failure is not None and failure.stage in GATE_STAGES:
        return ExitCode.GATE_FAILED_ROLLED_BACK
    return ExitCode.ROLLOUT_FAILED  # refused, left_failed, rolled back after a rollout failure or a bug, pods left


class Timings(dict[str, float]):
    """Seconds per phase; ``current`` names the phase running now (the stage of a failure)."""

    current: str = "plan"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start, self.current = time.monotonic(), name
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.monotonic() - start


class _OutcomeFields(TypedDict):
    result: Result
    release: str
    namespace: str
    revision: int | None
    failure: dict[str, str] | None
    timings: dict[str, float]
    gate: Mapping[str, object] | None
    time_to_serving: Mapping[str, object] | None  # TimeToServing.to_json() of the revision judged
    warnings: list[str]
    rolled_back_to: int | None
    message: str
    exit_code: int


class OutcomeJson(_OutcomeFields, total=False):
    """An Outcome as `--output json` prints it (docs/cli.md); ``changes`` only with --dry-run."""

    changes: list[dict[str, str]]


@dataclasses.dataclass
class Outcome:
    result: Result
    release: str
    namespace: str
    message: str
    revision: int | None = None
    failure: Failure | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    gate: gate.GateReport | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    rolled_back_to: int | None = None
    changes: list[dict[str, str]] | None = None  # --dry-run: what would be applied
    time_to_serving: Mapping[str, object] | None = None  # how long the judged revision took to serve

    @property
    def exit_code(self) -> ExitCode:
        return exit_code(self.result, self.failure)

    def to_json(self) -> OutcomeJson:
        data: OutcomeJson = {
            "result": self.result,
            "release": self.release,
            "namespace": self.namespace,
            "revision": self.revision,
            "failure": self.failure.to_json() if self.failure else None,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
            "gate": self.gate.to_json() if self.gate else None,
            "time_to_serving": self.time_to_serving,
            "warnings": self.warnings,
            "rolled_back_to": self.rolled_back_to,
            "message": self.message,
            "exit_code": int(self.exit_code),
        }
        if self.changes is not None:
            data["changes"] = self.changes
        return data
