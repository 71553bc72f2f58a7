"""The OpenAPI fuzz's coverage table (tests/service/test_openapi_fuzz.py), for the whole run.

Each fuzz test records, as its report's `openapi_fuzz` property, the statuses every role was
answered for one operation and generation mode, and how many of those answers reached the
operation. Reports travel from pytest-xdist's workers to the controller, so the table is put
together here, once, at the end of the run: written to `openapi-fuzz-coverage.md` in pytest's
temporary folder (`--basetemp`, else pytest's own) and summed up in one line of the terminal
summary. Loaded by tests/conftest.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

PROPERTY = "openapi_fuzz"
ROLES = ("agent", "reviewer", "policy_editor", "admin", "outsider")


def coverage_rows(reports) -> list[dict]:
    """The `openapi_fuzz` properties of the reports (a worker's report carries them as lists)."""
    return [value for report in reports if report.when == "call"
            for name, value in report.user_properties if name == PROPERTY]


def coverage_table(rows: list[dict]) -> tuple[str, dict]:
    """(a Markdown table of operation x role, a summary): each cell is `reached/sent` and the
    statuses answered (`200x12 404x3`), both generation modes together."""
    statuses: dict[tuple[str, str], Counter] = defaultdict(Counter)
    reached: Counter = Counter()
    for row in rows:
        for role, counts in row["statuses"].items():
            statuses[row["operation"], role].update({int(code): n for code, n in counts.items()})
            reached[row["operation"], role] += row["reached"].get(role, 0)
    operations = sorted({operation for operation, _ in statuses})
    lines = ["| operation | " + " | ".join(ROLES) + " |", "|---" * (len(ROLES) + 1) + "|"]
    for operation in operations:
        cells = []
        for role in ROLES:
            counts = statuses[operation, role]
            answered = " ".join(f"{code}×{n}" for code, n in sorted(counts.items()))
            cells.append(f"{reached[operation, role]}/{sum(counts.values())}: {answered}")
        lines.append(f"| `{operation}` | " + " | ".join(cells) + " |")
    all_counts = sum(statuses.values(), Counter())
    summary = {
        "operations": len(operations),
        "cells": len(statuses),
        "never_reached": sorted(f"{operation} {role}" for (operation, role) in statuses
                                if not reached[operation, role]),
        "requests": sum(all_counts.values()),
        "reached": sum(reached.values()),
        "throttled": all_counts[429],
        "server_errors": sum(n for code, n in all_counts.items() if code >= 500),
        "succeeded": sum(n for code, n in all_counts.items() if 200 <= code < 300),
    }
    return "\n".join(lines) + "\n", summary


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    reports = [report for key in ("passed", "failed") for report in terminalreporter.stats.get(key, [])]
    rows = coverage_rows(reports)
    if not rows or hasattr(config, "workerinput"):
        return
    table, summary = coverage_table(rows)
    path = Path(config._tmp_path_factory.getbasetemp()) / "openapi-fuzz-coverage.md"  # noqa: SLF001 - pytest's own
    path.write_text(table, encoding="utf-8")
    never = ", ".join(summary["never_reached"]) or "none"
    terminalreporter.write_line(
        f"OpenAPI fuzz: {summary['operations']} operations x {len(ROLES)} roles, never reached: {never}; "
        f"{summary['requests']} requests, {summary['reached']} reached the operation, {summary['succeeded']} 2xx, "
        f"{summary['throttled']} x 429, {summary['server_errors']} x 5xx; table: {path}")
