"""The README's headline figures for context quality agree with bench/results/quality.json (the
last `make bench-quality` run): a **0** is claimed only for what ctxeng kept out at every step of
every run, and what it leaks stands beside it with its range."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ctxeng_runs() -> list[dict]:
    runs = json.loads((ROOT / "bench" / "results" / "quality.json").read_text())
    return [r for r in runs if r["system"] == "ctxeng"]


def headline_row(words: str) -> str:
    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| ") and words in line]
    assert len(rows) == 1, (words, rows)
    return rows[0]


def test_the_zero_leak_row_claims_only_what_every_run_kept_out():
    row = headline_row("records a call fetched for another customer")
    assert row.split("|")[2].strip() == "**0**"
    for run in ctxeng_runs():
        assert run["forbidden_stale"] == run["forbidden_secret"] == run["forbidden_scope_by_argument"] == 0, run["scenario"]


def test_records_whose_owner_only_their_text_names_stand_beside_it_with_their_range():
    counts = [r["forbidden_scope_in_content"] for r in ctxeng_runs()]
    row = headline_row("`scope_in_content`")
    low, high = re.search(r"(\d+)–(\d+) marker-steps per run", row).groups()
    assert (int(low), int(high)) == (min(counts), max(counts))
    assert "not caught" in row


def test_pages_no_event_dates_stand_beside_it_with_their_range():
    counts = [r["forbidden_expired"] for r in ctxeng_runs()]
    row = headline_row("(`expired`)")
    low, high = re.search(r"(\d+)–(\d+) marker-steps per run", row).groups()
    assert (int(low), int(high)) == (min(counts), max(counts))
    assert "not caught" in row
    research_agent = [r["forbidden_expired"] for r in json.loads((ROOT / "bench" / "results" / "quality.json").read_text())
                      if r["system"] == "ctxeng_research_agent" and r["context_limit"] == 16000]
    assert re.search(r"\((\d+) under the research-agent starter", row).group(1) == str(research_agent[0])


def test_the_usage_report_row_is_the_last_calibration_bound_run():
    """The README's F3 row (issue 51) quotes bench/results/issue51-calibration-bound.md."""
    results = (ROOT / "bench" / "results" / "issue51-calibration-bound.md").read_text()
    (before, next_before), (after, next_after) = re.findall(
        r"^\| (?:before|after): .*? \| ([\d,]+) \(factor [\d.]+\) \| ([\d,]+) \(factor [\d.]+\) \|", results, re.M)
    row = headline_row("20 usage reports at 1.99×")
    assert f"({after} → {next_after})" in row.split("|")[2] and f"({before} → {next_before};" in row.split("|")[3]
    for claimed, (start, end) in ((row.split("|")[2], (after, next_after)), (row.split("|")[3], (before, next_before))):
        change = round(100 * (int(end.replace(",", "")) - int(start.replace(",", ""))) / int(start.replace(",", "")))
        assert f"−{-change}%" in claimed, (claimed, change)
