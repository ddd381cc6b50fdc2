"""The preflight apply runs against the cluster: the release is rendered once, and the strategy
preflight chooses is set on that render exactly as a render with the strategy would write it."""

from __future__ import annotations

import copy
import pathlib

import pytest

from orchestrator import conventions
from orchestrator.apply import cluster_preflight
from orchestrator.plan import planner
from orchestrator.profile import model as profiles
from orchestrator.render import manifests as render

PROFILES = pathlib.Path(__file__).resolve().parent.parent / "profiles"


@pytest.mark.parametrize("strategy", sorted(conventions.STRATEGIES))
def test_the_chosen_strategy_set_on_the_one_render_equals_a_render_with_it(strategy: str) -> None:
    prof = profiles.load(PROFILES / "dev-tp2.yaml")
    plan = planner.plan(prof)
    spec = conventions.strategy_spec(strategy)
    objects = render.render(prof, plan)
    cluster_preflight.with_strategy(objects, spec)
    assert render.to_yaml(objects) == render.to_yaml(render.render(prof, plan, strategy=spec))


def test_the_strategy_set_is_a_copy_the_verdict_does_not_share() -> None:
    prof = profiles.load(PROFILES / "dev-tp2.yaml")
    objects = render.render(prof, planner.plan(prof))
    spec = conventions.strategy_spec("surge")
    cluster_preflight.with_strategy(objects, spec)
    before = copy.deepcopy(spec)
    next(o for o in objects if o["kind"] == "Deployment")["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = 9
    assert spec == before


def test_groups_take_no_deployment_strategy() -> None:
    objects = [{"kind": "RayCluster", "metadata": {"name": "x"}, "spec": {}}]
    cluster_preflight.with_strategy(objects, {})
    assert objects == [{"kind": "RayCluster", "metadata": {"name": "x"}, "spec": {}}]
