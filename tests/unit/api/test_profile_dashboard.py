"""The chart's Grafana dashboard (charts/sandbox-orchestrator/dashboards/sandbox-profiles.json) asks only for what
the controller exports: every metric its PromQL names is in the /metrics of a ``ServiceMetrics`` that measured a
run, and every variable it uses is defined. (tests/k8s/test_chart_render.py renders the chart's ConfigMap of it.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.metrics import RUNS_ENDED, USAGE_HISTOGRAMS, ServiceMetrics
from orchestrator.domain.usage import EndCause, RunLimits, RunUsage
from tests.support.paths import ROOT

DASHBOARD = ROOT / "charts" / "sandbox-orchestrator" / "dashboards" / "sandbox-profiles.json"

# What PromQL names that is not a metric: functions and aggregations (always followed by "("), and keywords.
# fmt: off
FUNCTIONS = frozenset({
    "abs", "absent", "avg", "avg_over_time", "bottomk", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count", "count_over_time", "count_values", "delta", "deriv", "floor", "group", "histogram_quantile", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "max", "max_over_time", "min",
    "min_over_time", "predict_linear", "quantile", "quantile_over_time", "rate", "resets", "round", "scalar", "sort",
    "sort_desc", "stddev", "stdvar", "sum", "sum_over_time", "time", "timestamp", "topk", "vector",
})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                      "offset"})
# fmt: on
GRAFANA_VARIABLES = frozenset({"__rate_interval", "__interval", "__range"})  # Grafana's own

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")  # [5m], [$window]
_MATCHERS = re.compile(r"\{[^}]*\}")  # {profile="$profile"}: label names, not metrics
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")  # by (le): labels
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_VARIABLE = re.compile(r"\$\{?(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((\w+),\s*(\w+)\)$")


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression names: identifiers followed by ``{``, ``[`` or bare, less functions (checked
    to be functions: followed by ``(``), keywords, label names and what strings, ranges and variables hold."""
    bare = _STRING.sub('""', expr)
    bare = _RANGE.sub("[]", bare)
    bare = _MATCHERS.sub("{}", bare)
    bare = _GROUPING.sub(" ", bare)
    bare = re.sub(r"\$\{?\w+\}?", " ", bare)
    names = set()
    for match in _IDENTIFIER.finditer(bare):
        word, rest = match.group(), bare[match.end() :].lstrip()
        if rest.startswith("("):
            assert word in FUNCTIONS, f"{word!r} in {expr!r} is no PromQL function"
        elif word not in KEYWORDS:
            names.add(word)
    return names


def test_the_tokenizer_finds_metrics_not_functions_labels_or_variables() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le) (rate(a_bucket{profile="$profile",cause=~"x|y"}[$window])))'
        " / on (profile) group_left max(b) + ignoring (le) c_total[5m] * 60"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c_total"}


@cache
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in node.get("panels", []):
        yield panel
        yield from panels(panel)  # a collapsed row holds its panels


def expressions() -> list[str]:
    return [t["expr"] for p in panels(dashboard()) for t in p.get("targets", [])]


@cache
def exported() -> frozenset[str]:
    """Every sample name a scrape of the controller shows once a run was measured (histograms: _bucket, _sum,
    _count; counters: _total)."""
    metrics = ServiceMetrics()
    limits = RunLimits(1.0, 2**30, 128, 600.0, 2**20, 2**20, 2**30, 1000)
    run = RunUsage("e", "ci", 0.0, EndCause.OK, limits, 0.5, 2**26, 4, 1.0, 10, 0, 0, 0, "cgroup")
    metrics.run_measured(run)
    metrics.watch_limits(lambda: [("ci", limits)])
    text = metrics.render().decode()
    return frozenset(s.name for family in text_string_to_metric_families(text) for s in family.samples)


def test_every_metric_the_dashboard_names_is_exported() -> None:
    exprs = expressions()
    assert len(exprs) >= 7
    named: set[str] = set()
    for expr in exprs:
        found = metric_names(expr)
        assert found, f"no metric in {expr!r}"
        assert found <= exported(), f"{expr!r} names what the controller does not export: {found - exported()}"
        named |= found
    # and it draws each of them: every histogram's distribution, each limit, the ends by cause
    assert {f"{h.name}_bucket" for h in USAGE_HISTOGRAMS} <= named
    assert {h.limit for h in USAGE_HISTOGRAMS if h.limit is not None} <= named
    assert f"{RUNS_ENDED}_total" in named


def test_the_profile_variable_lists_the_profiles_the_controller_labels() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    profile = variables["profile"]
    match = _LABEL_VALUES.match(profile["query"])
    assert match is not None, profile["query"]
    metric, label = match.groups()
    assert metric in exported() and label == "profile"
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    # one row per chosen profile, its panels each for that profile
    rows = [p for p in panels(dashboard()) if p["type"] == "row"]
    assert [r.get("repeat") for r in rows] == ["profile"]
    for expr in expressions():
        assert 'profile="$profile"' in expr, expr


def test_every_variable_used_is_defined() -> None:
    defined = {v["name"] for v in dashboard()["templating"]["list"]} | GRAFANA_VARIABLES
    used = {name for p in panels(dashboard()) for name in _VARIABLE.findall(json.dumps(p))}
    assert used - defined == set()
    assert {"profile", "window", "datasource"} <= used
