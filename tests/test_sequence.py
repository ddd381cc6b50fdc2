"""What the apply, rollback and GitOps gate sequences share (orchestrator.apply.sequence): the options
reach the gate's spec, and an error met after the first write becomes the failure that picks the exit code."""

from __future__ import annotations

import pathlib

from orchestrator import errors
from orchestrator.apply import outcome, sequence
from orchestrator.kube import connection
from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.render import manifests as render

PROFILES = pathlib.Path(__file__).resolve().parent.parent / "profiles"


def test_the_options_are_a_connection_whatever_else_they_carry() -> None:
    options = sequence.Options(kubeconfig="/k", context="ctx", timeout=5.0)
    assert isinstance(options, connection.Connection)
    assert (options.kubeconfig, options.context) == ("/k", "ctx")


def test_the_gate_spec_takes_the_timeout_and_bench_choice_of_the_options() -> None:
    prof = profiles.load(PROFILES / "dev-tp2.yaml")
    objects = render.render(prof, planner.plan(prof))
    spec = sequence.gate_spec(prof, objects, sequence.Options(timeout=42.0, skip_bench=True))
    assert spec.rollout_timeout == 42.0
    assert spec.smoke is None
    default = sequence.gate_spec(prof, objects, sequence.Options())
    assert default.rollout_timeout == float(prof.rollout.progressDeadlineSeconds)


def test_a_cluster_error_after_the_first_write_is_the_clusters_exit_4() -> None:
    failure = sequence.unexpected_failure(errors.Forbidden("may not patch deployments"), "apply")
    assert (failure.cls, failure.stage, failure.message) == ("cluster_error", "apply", "may not patch deployments")
    assert outcome.exit_code("rolled_back", failure) == errors.ExitCode.CLUSTER_ERROR


def test_any_other_exception_is_a_bug_of_ours_reported_with_its_type() -> None:
    failure = sequence.unexpected_failure(KeyError("spec"), "rollout")
    assert failure.cls == outcome.INTERNAL_CLASS
    assert "during rollout (KeyError: 'spec'); please report it" in failure.message
