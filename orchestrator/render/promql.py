"""The PromQL of one release's series, written through its engine version's metric table.

The alert rules (``orchestrator.render.alerts``) and the dashboard (``orchestrator.render.dashboard``)
ask the same questions, so they share these builders: a query never spells a metric name itself,
only a role of the table (``orchestrator.engines.metric_table``), and every selector carries the two
labels that confine it to the release: ``namespace`` and ``deployctl_dev_release``, which the
release's PodMonitor copies from the pods (``podTargetLabels``; Prometheus writes the pod label
``deployctl.dev/release`` with underscores). ``confined`` checks a stored rule for exactly that.
"""

from __future__ import annotations

import dataclasses
import re

from orchestrator import conventions
from orchestrator.engines import metric_table
from orchestrator.profile import model as profiles

# The PodMonitor copies these pod labels onto every series (podTargetLabels).
TARGET_POD_LABELS = (conventions.RELEASE_LABEL, conventions.TRACK_LABEL)
RELEASE_LABEL = conventions.prometheus_label(conventions.RELEASE_LABEL)
TRACK_LABEL = conventions.prometheus_label(conventions.TRACK_LABEL)
WINDOW = "5m"  # the rate window of every query: several scrapes at the PodMonitor's 30 s default


@dataclasses.dataclass(frozen=True)
class Scope:
    """What selects one release's series, and the table that names them."""

    namespace: str
    release: str
    table: metric_table.MetricTable

    @property
    def matchers(self) -> str:
        return f'namespace="{self.namespace}",{RELEASE_LABEL}="{self.release}"'

    def series(self, role: str, suffix: str = "") -> str | None:
        """The selector of ``role`` within the release, or None where the engine has no such series."""
        found = self.table.role(role)
        return found.selector(self.matchers, suffix) if found else None

    def up(self) -> str:
        """Prometheus' own scrape health of the release's targets (1 answered, 0 did not)."""
        return f"up{{{self.matchers}}}"


def scope(profile: profiles.Profile) -> Scope:
    engine = profile.engine
    return Scope(
        profile.metadata.namespace, profile.metadata.name, metric_table.table(engine.kind, engine.engine_version)
    )


def rate(selector: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({selector}[{WINDOW}]))"


def error_ratio(s: Scope, by: str = "") -> str | None:
    """failed / (succeeded + failed) over WINDOW, summed ``by`` labels; None without both counters.

    An engine creates a counter's series at its first increment: a pod that never answered a request
    well has no success series, one that never failed none of failure. ``or … * 0`` stands in a zero
    for the missing side, so a server that fails every request reads 1, not an empty result."""
    failed, succeeded = s.series("failed"), s.series("succeeded")
    if failed is None or succeeded is None:
        return None
    fails, successes = rate(failed, by), rate(succeeded, by)
    fails_or_zero = f"({fails} or {successes} * 0)"
    return f"{fails_or_zero} / ({fails_or_zero} + ({successes} or {fails} * 0))"


def requests_rate(s: Scope) -> str | None:
    """Requests per second that ended, well or not, over WINDOW; None without both counters."""
    failed, succeeded = s.series("failed"), s.series("succeeded")
    if failed is None or succeeded is None:
        return None
    return f"(({rate(failed)} or vector(0)) + ({rate(succeeded)} or vector(0)))"


def quantile(s: Scope, role: str, q: float, by: str = "") -> str | None:
    """The ``q`` quantile of histogram ``role`` over WINDOW, in seconds; None where the engine has none."""
    buckets = s.series(role, "_bucket")
    if buckets is None:
        return None
    grouping = ", ".join(part for part in ("le", by) if part)
    return f"histogram_quantile({q:g}, sum by ({grouping}) (rate({buckets}[{WINDOW}])))"


# --- what a stored rule may hold ---------------------------------------------------------------------

_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\{([^{}]*)\}")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")  # [5m], a subquery's [15m:1m]
_NUMBER = re.compile(r"(?<![A-Za-z_:])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|[smhdwy])?")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "__selector__"})


def confined(expr: str, namespace: str, release: str) -> list[str]:
    """Why ``expr`` could read series outside the release; empty when every series it selects
    carries ``namespace="…"`` and the release label as exact matchers (a rule from a stored record
    is checked before deployctl writes it: a forged one could read, or alert on, any namespace)."""
    wanted = (f'namespace="{namespace}"', f'{RELEASE_LABEL}="{release}"')
    found: list[str] = []
    for match in _SELECTOR.finditer(expr):
        matchers = {part.strip() for part in _STRING.sub(lambda m: m[0].replace(",", "\0"), match[2]).split(",")}
        matchers = {m.replace("\0", ",") for m in matchers}
        if not all(w in matchers for w in wanted):
            found.append(f"the selector {match[0]} is not confined to {' and '.join(wanted)}")
    rest = _SELECTOR.sub(" __selector__ ", expr)
    rest = _NUMBER.sub(" ", _RANGE.sub(" ", _GROUPING.sub(" ", _STRING.sub(" ", rest))))
    for match in _IDENTIFIER.finditer(rest):
        after = rest[match.end() :].lstrip()
        if match[0] not in _KEYWORDS and not after.startswith("("):
            found.append(f"{match[0]} selects series without the release's labels")
    return found
