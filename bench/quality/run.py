"""`make bench-quality` (`python -m bench.quality.run [--steps N] [--limits 16000,128000]`).

Generates the three scenarios (written to `bench/quality/scenarios/<name>.json` with their
digests), runs every step through the four systems at each context limit, and writes
`bench/results/quality.json` (one row per system x scenario x limit, plus each row's per-step
figures) and `bench/results/quality.png` (required-marker retention per step). About 2-3 minutes
on a 2-core machine. Also section 7 of `python -m bench.run --only 7`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import scenarios, systems

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
LIMITS = (16_000, 128_000)
WHYS = ("stale", "secret", "scope_by_argument", "scope_in_content", "expired")


def usable_of(scenario: dict[str, Any], limit: int) -> int:
    return limit - systems.reserve(scenario["scenario"], limit)


def summarize(system: str, scenario: dict[str, Any], limit: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
    required = sum(s["required"] for s in steps)
    present = sum(s["required_present"] for s in steps)
    reasons: dict[str, int] = {}
    for s in steps:
        if s["refused"]:
            kind = s["refused"].split(":", 1)[0]
            reasons[kind] = reasons.get(kind, 0) + 1
    return {
        "system": system,
        "scenario": scenario["scenario"],
        "context_limit": limit,
        "steps": len(steps),
        "blocked_steps": sum(1 for s in steps if s["blocked"]),
        "required_pct": round(100 * present / required, 2) if required else 100.0,
        "forbidden": sum(len(s["forbidden_present"]) for s in steps),
        **{f"forbidden_{why}": sum(s["forbidden_by_why"].get(why, 0) for s in steps) for why in WHYS},
        "injected_in_authority": sum(len(s["injected_in_authority"]) for s in steps),
        "injected_outside_fences": sum(len(s["injected_outside_fences"]) for s in steps),
        "history_tokens_max": max(s["history_tokens"] for s in steps),
        "refused_payloads": sum(1 for s in steps if s["refused"]),
        "input_tokens_mean": round(sum(s["input_tokens"] for s in steps) / len(steps), 1),
        # ctxeng's usable input (the manifest's budget.usable_input); a baseline's is limit - reserve.
        "usable_input_mean": round(sum(s.get("usable_input", usable_of(scenario, limit)) for s in steps) / len(steps), 1),
        "ms_per_step": round(sum(s["ms"] for s in steps) / len(steps), 2),
        "refused_by_reason": reasons,
        "steps_below_100pct": sum(1 for s in steps if s["required_present"] < s["required"]),
        "generator_version": scenario["version"],
        "scenario_digest": scenarios.digest(scenario),
        "per_step": [{k: s[k] for k in ("step", "required", "required_present", "missing", "forbidden_present",
                                        "injected_in_authority", "injected_outside_fences", "refused", "input_tokens",
                                        "history_tokens", "ms")}
                     | ({"usable_input": s["usable_input"]} if "usable_input" in s else {})
                     | ({"blocked_reason": s["blocked_reason"]} if s.get("blocked_reason") else {}) for s in steps],
    }


def run_all(*, limits=LIMITS, max_steps: int | None = None, names=scenarios.NAMES, system_names=systems.SYSTEMS,
            write_scenarios: Path | None = None) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        scenario = scenarios.generate(name)
        if write_scenarios is not None:
            write_scenarios.mkdir(parents=True, exist_ok=True)
            (write_scenarios / f"{name}.json").write_bytes(scenarios.canonical(scenario) + b"\n")
        for limit in limits:
            print(f"[quality] {name} at {limit} ...", file=sys.stderr, flush=True)
            extra = systems.EXTRA_SYSTEMS.get(name, ()) if system_names == systems.SYSTEMS else ()
            per_system = systems.run_scenario(scenario, limit, systems=(*system_names, *extra), max_steps=max_steps)
            for system, steps in per_system.items():
                rows.append(summarize(system, scenario, limit, steps))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("system", "scenario", "context_limit", "history_tokens_max", "blocked_steps", "required_pct",
            *(f"forbidden_{why}" for why in WHYS), "injected_in_authority", "injected_outside_fences",
            "refused_payloads", "input_tokens_mean", "usable_input_mean", "ms_per_step")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in sorted(rows, key=lambda r: (r["scenario"], r["context_limit"], systems.ALL_SYSTEMS.index(r["system"]))):
        lines.append("| " + " | ".join(str(r[k]) for k in head) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["scenario"] for r in rows})
    limits = sorted({r["context_limit"] for r in rows})
    fig, axes = plt.subplots(len(limits), len(names), figsize=(5 * len(names), 3.2 * len(limits)), squeeze=False, sharey=True)
    for i, limit in enumerate(limits):
        for j, name in enumerate(names):
            ax = axes[i][j]
            for r in rows:
                if r["scenario"] == name and r["context_limit"] == limit:
                    xs = [s["step"] for s in r["per_step"]]
                    ys = [100 * s["required_present"] / s["required"] if s["required"] else 100 for s in r["per_step"]]
                    ax.plot(xs, ys, label=r["system"], linewidth=1.4)
            ax.set_title(f"{name}, {limit // 1000}k")
            ax.set_ylim(-5, 105)
            ax.set_xlabel("step")
            if j == 0:
                ax.set_ylabel("required markers present (%)")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    tmp = RESULTS / "quality.json.tmp"
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    tmp.replace(RESULTS / "quality.json")
    plot(rows, RESULTS / "quality.png")


def run(*, quick: bool = False) -> list[Any]:
    """Section 7 of `bench.run`: the full run (or 8 steps with --quick), its rows as bench Rows."""
    from ..timing import Row

    rows = run_all(max_steps=8 if quick else None, write_scenarios=None if quick else HERE / "scenarios")
    if not quick:
        write(rows)
    return [Row("7 quality", f"{r['scenario']} {r['context_limit'] // 1000}k {r['system']}",
                f"required {r['required_pct']}%, forbidden {r['forbidden']}, injected {r['injected_in_authority']}, "
                f"refused {r['refused_payloads']}, blocked {r['blocked_steps']}, {r['input_tokens_mean']} tokens",
                None, "(reported)", None) for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.quality.run")
    parser.add_argument("--steps", type=int, default=None, help="only the first N steps of each scenario (a smoke run)")
    parser.add_argument("--limits", default=",".join(str(n) for n in LIMITS))
    args = parser.parse_args(argv)
    rows = run_all(limits=tuple(int(n) for n in args.limits.split(",")), max_steps=args.steps, write_scenarios=HERE / "scenarios")
    write(rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
