"""What an engine's /metrics serves, held to deployctl's metric table for that engine version."""

from __future__ import annotations

from orchestrator.engines import metric_table
from orchestrator.gate import exposition


def unanswered(table: metric_table.MetricTable, text: str) -> list[str]:
    """Each role of ``table`` that the exposition ``text`` does not answer as the table says, and why."""
    served = {family.name.removesuffix("_total"): family for family in exposition.parse(text).values()}
    problems: list[str] = []
    for role in metric_table.ROLES:
        series = table.role(role)
        if series is None:
            continue
        # prometheus_client names a counter's family with or without its _total, by version.
        family = served.get(series.family.name.removesuffix("_total"))
        if family is None:
            problems.append(f"{role}: {series.family.name} is not served")
        elif family.kind != series.family.kind:
            problems.append(f"{role}: {series.family.name} is a {family.kind}, the table says {series.family.kind}")
        elif missing := set(series.family.labels) - set(family.label_names()):
            problems.append(f"{role}: {series.family.name} lacks the labels {sorted(missing)}")
    return problems
