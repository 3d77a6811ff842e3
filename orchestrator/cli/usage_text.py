"""The text ``sandboxctl profiles usage | recommend | whatif`` print for people (``--json`` prints the models
whole): one table per group, values in the unit a profile file writes them in."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.domain.profile_usage import Recommendation, RunList, UsageReport, WhatIfReport

MIB = 2**20


def figure(value: float | None, unit: str) -> str:
    """A value as a person reads it: bytes in MiB, seconds and cores with their unit; '-' for unknown."""
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value / MIB:.1f}Mi"
    if unit == "s":
        return f"{value:.2f}s"
    if unit == "cores":
        return f"{value:.2f}"
    return f"{value:g}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]


def usage_text(report: UsageReport) -> str:
    lines = [f"profile {report.profile}: {report.runs} runs"]
    for group in report.groups:
        if report.group_by is not None:
            lines += ["", f"{report.group_by} {group.group or '(none)'}: {group.runs} runs"]
        rows = [["measure", "known", "unknown", "p50", "p90", "p95", "p99", "max", "limit", "max/limit", "ended at"]]
        for m in group.measures:
            p = m.percentiles
            values = [p.p50, p.p90, p.p95, p.p99, p.max] if p is not None else [None] * 5
            ratio = "-" if m.max_of_limit is None else f"{m.max_of_limit:.0%}"
            ended = "-" if m.ended_at_limit is None else str(m.ended_at_limit)
            rows.append(
                [
                    m.measure,
                    str(m.known),
                    str(m.unknown),
                    *(figure(v, m.unit) for v in values),
                    figure(m.limit, m.unit),
                    ratio,
                    ended,
                ]
            )
        lines += _table(rows)
        ended_by = ", ".join(f"{cause} {n}" for cause, n in group.ended.items() if n)
        lines.append(f"ended: {ended_by or 'none'}")
    return "\n".join(lines) + "\n"


def recommendation_text(answer: Recommendation) -> str:
    lines = [f"profile {answer.profile}: {answer.runs} runs (a value needs {answer.min_runs})"]
    rows = [["limit", "now", "recommended", "change", "confidence", "rule"]]
    for r in answer.resources:
        rows.append(
            [r.key, figure(r.current, r.unit), figure(r.recommended, r.unit), r.change or "-", r.confidence, r.rule]
        )
    lines += _table(rows)
    lines += [f"  {r.key}: {r.reason or r.rule_text}" for r in answer.resources]
    lines += [f"note: {note}" for note in answer.notes]
    lines += ["", "# the change, as a profile's limits: (none when empty)", answer.yaml_patch().rstrip("\n")]
    return "\n".join(lines) + "\n"


def _unit(key: str) -> str:
    """The unit of a profile `limits:` key's value."""
    return "bytes" if key == "memory" or key.endswith("_bytes") else "s" if key.endswith("_s") else "count"


def _named(runs: RunList) -> str:
    more = runs.total - len(runs.execution_ids)
    return ", ".join(runs.execution_ids) + (f" (+{more} more)" if more > 0 else "")


def whatif_text(report: WhatIfReport) -> str:
    lines = [f"profile {report.profile}: {report.runs} runs replayed"]
    for replay in report.limits:
        verb = "would end as" if replay.kills else "would be cut as"
        now, then = figure(replay.current, _unit(replay.key)), figure(replay.proposed, _unit(replay.key))
        lines.append(
            f"{replay.key}: {now} -> {then}: {replay.would_meet.total} {verb}"
            f" {replay.ends_as} ({replay.already} already did), {replay.within} within,"
            f" {replay.unknown.total} unknown"
        )
        if replay.would_meet.total:
            lines.append(f"  {_named(replay.would_meet)}")
        if replay.used_of_limit is not None:
            lines.append(
                f"  used of the new limit: p50 {replay.used_of_limit.p50:.0%}, p95 {replay.used_of_limit.p95:.0%},"
                f" max {replay.used_of_limit.max:.0%}"
            )
    if report.cpu is not None:
        cpu = report.cpu
        lines.append(
            f"cpus: {cpu.current:g} -> {cpu.proposed:g}: {cpu.slower.total} slower (throttled),"
            f" {cpu.would_time_out_estimated.total} would time out (estimated), {cpu.unknown.total} unknown"
        )
    if report.node is not None:
        node = report.node
        lines.append(
            f"a node of {node.node.cpus:g} cores and {figure(node.node.memory_bytes, 'bytes')}: {node.current}"
            f" runs at once now, {node.proposed} proposed ({node.gain:+d})"
        )
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
