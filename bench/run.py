"""`make bench` (`python -m bench.run [--quick] [--only 1,2]`): the five benchmarks of issue 5,
issue 14's database growth (6), issue 37's payload figures (8), issue 48's step on real traces (9),
issue 47's stale reads (10), issue 50's absence classifier (11), issue 49's recording (12) and
issue 51's large submits against /healthz and another tenant (13).

Prints a table of figures and ratios against their targets, writes `bench/results/latest.json`
(every row with its raw timings) and `bench/results/latest.md` (the table the README carries).
A section that cannot run here (no redis-server, no service yet) reports `not run: <reason>` and
the others still run; then the results are written and `make bench` fails (exit 1) naming each
section and measure not run, so a table with a hole is never mistaken for a complete run. Sized to finish in about 10 minutes on a quiet 2-core machine (17 on a slow one; section 12 has a 60 s outage, section 13 runs gunicorn twice).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from .timing import Row

RESULTS = Path(__file__).resolve().parent / "results"

SECTIONS = (
    ("1", "1 engine", "bench.engine_floor"),
    ("2", "2 trim_messages", "bench.trim_messages"),
    ("3", "3 growth", "bench.growth"),
    ("4", "4 service", "bench.service"),
    ("5", "5 dashboard", "bench.dashboard"),
    ("6", "6 storage", "bench.storage"),
    # Context quality (issue 28): `make bench-quality` runs it on its own; here only with --only 7.
    ("7", "7 quality", "bench.quality.run"),
    # What the model sees (issue 37): tokens vs raw, cache-eligible share, step vs trim_messages, import.
    ("8", "8 payload", "bench.payload"),
    # The step on real agent histories beside trim_messages, fresh-process costs (issue 48).
    ("9", "9 real traces", "bench.step_traces"),
    # Reads made stale by a later write on the real traces, against hand labels (issue 47).
    ("10", "10 stale reads", "bench.stale_reads"),
    # Statements of absence judged by meaning, against hand labels (issue 50).
    ("11", "11 absence", "bench.absence"),
    # Recording local steps (issue 49): the agent's overhead, the service's intake and verification, an outage.
    ("12", "12 recording", "bench.recording"),
    # Six parallel 4 MB submits from one tenant against /healthz and another tenant's API (issue 51, N4).
    ("13", "13 big submits", "bench.big_submits"),
)


def _section(label: str, module: str, quick: bool) -> list[Row]:
    import importlib

    try:
        mod = importlib.import_module(module)
        return mod.run(quick=quick)
    except Exception as exc:  # noqa: BLE001 - one section failing must not hide the others
        detail = traceback.format_exc(limit=3)
        return [Row(label, "section", f"not run: {type(exc).__name__}: {exc}"[:300], data={"traceback": detail})]


def table(rows: list[Row]) -> str:
    lines = ["| benchmark | measure | figure | ratio | target | met |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        ratio = "" if r.ratio is None else f"{r.ratio:g}x"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.bench} | {r.name}{note} | {r.figure} | {ratio} | {r.target} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not figures to quote")
    parser.add_argument("--only", default="1,2,3,4,5,6,8,9,10,11,13", help="comma-separated section numbers (7, context quality: make bench-quality)")
    args = parser.parse_args(argv)
    wanted = set(args.only.split(","))
    started = time.monotonic()
    rows: list[Row] = []
    durations: dict[str, float] = {}
    for key, label, module in SECTIONS:
        if key not in wanted:
            continue
        t0 = time.monotonic()
        print(f"[bench] {label} ...", file=sys.stderr, flush=True)
        section = _section(label, module, args.quick)
        durations[label] = round(time.monotonic() - t0, 1)
        for r in section:
            print(f"[bench]   {r.name}: {r.figure}" + (f" -> {r.ratio:g}x (target {r.target})" if r.ratio is not None else ""), file=sys.stderr, flush=True)
        rows.extend(section)
    total = time.monotonic() - started
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    md = (
        f"Measured {stamp} on {platform.machine()} ({_cpus()} CPUs, Python {platform.python_version()}), "
        f"`make bench` took {total:.0f} s{' (--quick)' if args.quick else ''}. Ratios are against baselines timed in "
        "the same run, interleaved, medians of CPU time (see bench/timing.py).\n\n" + table(rows) + "\n"
    )
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "measured_at": stamp,
        "quick": args.quick,
        "total_seconds": round(total, 1),
        "section_seconds": durations,
        "machine": {"machine": platform.machine(), "cpus": _cpus(), "python": platform.python_version()},
        "rows": [r.to_dict() for r in rows],
    }
    tmp = RESULTS / "latest.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(RESULTS / "latest.json")
    (RESULTS / "latest.md").write_text(md)
    print(md)
    missing = not_run(rows)
    for line in missing:
        print(f"[bench] not run: {line}", file=sys.stderr, flush=True)
    return 1 if missing else 0


def not_run(rows: list[Row]) -> list[str]:
    """`<section>: <measure>: <reason>` of every row that reports it could not run."""
    return [f"{r.bench}: {r.name}: {r.figure.removeprefix('not run: ')}" for r in rows
            if isinstance(r.figure, str) and r.figure.startswith("not run")]


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    sys.exit(main())
