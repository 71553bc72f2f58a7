"""Timing helpers: interleaved rounds, medians, and result rows.

The machine is shared and noisy, so every figure is a ratio against a baseline timed in the same
rounds: each round runs every contender once, in an order that rotates from round to round, with a
full garbage collection before each timed call; the figure is the median over rounds.

What is timed is CPU time: of this process for in-process contenders, of the child for a
subprocess (`resource.getrusage(RUSAGE_CHILDREN)`). On a shared 2-core machine wall time mostly
measures the neighbours (the same floor ranged 0.8-2.2 s wall within one run); CPU time does not
see time spent waiting for a core. Wall times are recorded next to it in the JSON.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

WALL: dict[str, list[float]] = {}


def cpu_now() -> float:
    """CPU seconds of this process plus its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def interleaved(contenders: dict[str, Callable[[], Any]], rounds: int, *, setup: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """CPU seconds per contender per round; wall seconds go to `times["<name>:wall"]`."""
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:
        times[n + ":wall"] = []
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            if setup is not None:
                setup(name)
            gc.collect()
            c0, t0 = cpu_now(), time.perf_counter()
            contenders[name]()
            times[name + ":wall"].append(time.perf_counter() - t0)
            times[name].append(cpu_now() - c0)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


@dataclass
class Row:
    """One line of the results table: a figure, its ratio to a same-run baseline, and the target."""

    bench: str
    name: str
    figure: str
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def at_most(bench: str, name: str, figure: str, ratio: float, limit: float, note: str = "", **data: Any) -> Row:
    return Row(bench, name, figure, round(ratio, 3), f"<= {limit:g}x", ratio <= limit, note, data)


def at_least(bench: str, name: str, figure: str, ratio: float, limit: float, note: str = "", **data: Any) -> Row:
    return Row(bench, name, figure, round(ratio, 3), f">= {limit:g}x", ratio >= limit, note, data)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"
