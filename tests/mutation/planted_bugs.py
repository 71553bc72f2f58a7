"""Planted bugs: each is a small wrong engine, and `tests/engine` must notice every one.

Issue 15 planted 35 deliberate bugs in `ctxeng/engine/` one at a time and 18 went unnoticed.
This script re-plants those 18 (and a few neighbours) as exact text replacements, so the check is
repeatable: for each plant it copies the work tree to a temporary directory, applies the one
replacement, runs `pytest tests/engine` there, and reports whether a test that passes on the
unplanted tree now fails (caught) or not (survived). A plant whose `old` text no longer occurs
exactly once is reported as `stale`: the engine moved, and the plant must be rewritten to keep
meaning the same wrong behaviour.

    .venv/bin/python -m tests.mutation.planted_bugs            # all plants
    .venv/bin/python -m tests.mutation.planted_bugs call_tokens_not_counted untrusted_zone_first

Exit status 0 only when every plant was caught. The copy never touches the work tree, so the
script is safe to run while the engine is being edited; it checks that the copy's `ctxeng` is the
one the tests import (an editable install would otherwise shadow it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plant:
    name: str
    file: str
    old: str
    new: str
    breaks: str  # the README decision the plant violates


PLANTS: tuple[Plant, ...] = (
    Plant(
        "count_ahead_under_other_keys",
        "ctxeng/engine/budget.py",
        "                texts.append(block_count_parts(self.asm, u.item))\n",
        "                texts.append((None, block_count_parts(self.asm, u.item)[1]))\n",
        "the budget's guesses are counted under the keys the walk asks for, so the walk uses them",
    ),
    Plant(
        "walk_keeps_its_guesses",
        "ctxeng/engine/budget.py",
        "            if ahead:\n                settle_ahead(self.asm, ahead, wait=False)\n",
        "            if ahead and not ahead:\n                settle_ahead(self.asm, ahead, wait=False)\n",
        "no count started ahead outlives its assembly",
    ),
    Plant(
        "cancelled_count_is_awaited",
        "ctxeng/engine/tokens.py",
        "if ahead is not None and not ahead[0].cancelled() else",
        "if ahead is not None else",
        "a count let go of before it ran is counted when asked for",
    ),
    Plant(
        "bound_counts_runs_touching_non_ascii",
        "ctxeng/engine/bounds.py",
        '    letters = s.count(b" a") + s.count(b"da") + (first == b"a") - s.count(b"ax")\n',
        '    letters = s.count(b" a") + s.count(b"da") + (first == b"a")\n',
        "a lower bound never exceeds the count: a letter run that touches a non-ASCII character may be part of a longer piece",
    ),
    Plant(
        "reduction_bound_ignores_the_reduction",
        "ctxeng/engine/budget.py",
        "    if cand.pending_limit is None:\n        return floor\n",
        "    if True:\n        return floor\n",
        "an item whose source limit is pending is evicted on its bound only if no reduction of it could fit",
    ),
    Plant(
        "render_delivers_budget_evicted",
        "ctxeng/engine/render.py",
        "    plain = [c for c in included if id(c) not in paired]\n",
        "    plain = [c for c in asm.candidates if id(c) not in paired and (c.alive or c.exclusion.reason.value == 'budget_evicted')]\n",
        "payload = manifest: an item the budget evicted is never delivered",
    ),
    Plant(
        "second_pass_in_reversed_eviction_order",
        "ctxeng/engine/budget.py",
        "    return sorted(policy.partitions, key=lambda n: _EVICTION_ORDER[policy.partitions[n].eviction])\n",
        "    return sorted(policy.partitions, key=lambda n: _EVICTION_ORDER[policy.partitions[n].eviction], reverse=True)\n",
        "budget pass 2 grows partitions in eviction order, `never` first, `first` last",
    ),
    Plant(
        "second_pass_stops_at_first_misfit",
        "ctxeng/engine/budget.py",
        "            if not unit.admitted and not unit.dropped and budget.unit_fits(name, unit):\n"
        "                unit.admitted = True\n"
        "                budget.take(name, unit.tokens)  # type: ignore[arg-type]\n",
        "            if unit.admitted or unit.dropped:\n"
        "                continue\n"
        "            if not budget.unit_fits(name, unit):\n"
        "                break\n"
        "            unit.admitted = True\n"
        "            budget.take(name, unit.tokens)  # type: ignore[arg-type]\n",
        "both budget passes keep going past an item that does not fit",
    ),
    Plant(
        "first_pass_stops_at_first_misfit",
        "ctxeng/engine/budget.py",
        "            if budget.sized(unit, room) and alloc.used[name] + unit.tokens <= cap:  # type: ignore[operator]\n"
        "                unit.admitted = True\n"
        "                budget.take(name, unit.tokens)  # type: ignore[arg-type]\n",
        "            if not budget.sized(unit, room) or alloc.used[name] + unit.tokens > cap:  # type: ignore[operator]\n"
        "                break\n"
        "            unit.admitted = True\n"
        "            budget.take(name, unit.tokens)  # type: ignore[arg-type]\n",
        "both budget passes keep going past an item that does not fit",
    ),
    Plant(
        "no_first_pass_minimums",
        "ctxeng/engine/budget.py",
        "        cap = min(part.minimum, part.maximum) if part.maximum is not None else part.minimum\n",
        "        cap = 0\n",
        "budget pass 1 fills each partition to its minimum before any partition grows",
    ),
    Plant(
        "excluded_required_item_never_blocks",
        "ctxeng/engine/seal.py",
        '        if cand.item.required and not cand.alive and cand.exclusion and cand.exclusion.stage != "transforms":\n',
        '        if cand.item.required and not cand.alive and cand.exclusion and cand.exclusion.stage == "never":\n',
        "a `required` item that is not included blocks (required_partition_missing)",
    ),
    Plant(
        "budget_evicted_required_item_does_not_block",
        "ctxeng/engine/seal.py",
        '        if cand.item.required and not cand.alive and cand.exclusion and cand.exclusion.stage != "transforms":\n',
        '        if cand.item.required and not cand.alive and cand.exclusion and cand.exclusion.stage not in ("transforms", "budget"):\n',
        "a `required` item the budget evicted blocks like any other excluded required item",
    ),
    Plant(
        "required_partition_ignored",
        "ctxeng/engine/seal.py",
        "        if part.required and not any(c.partition == name for c in asm.alive()):\n",
        "        if part.required and not any(c.partition is not None for c in asm.alive()):\n",
        "`budget.partitions.<p>.required`: an empty required partition blocks",
    ),
    Plant(
        "untrusted_zone_first",
        "ctxeng/engine/render.py",
        "ZONE_ORDER = (Zone.CONTROL, Zone.TASK, Zone.STATE, Zone.UNTRUSTED_DATA)\n",
        "ZONE_ORDER = (Zone.CONTROL, Zone.UNTRUSTED_DATA, Zone.TASK, Zone.STATE)\n",
        "serialized order: blocks in zone order task, state, untrusted data",
    ),
    Plant(
        "rank_ignored_within_zone",
        "ctxeng/engine/render.py",
        "    return (cand.rank if cand.rank is not None else 10**9, cand.item_id)\n",
        "    return (0, cand.item_id)\n",
        "serialized order: rank order within a zone, ties by item_id",
    ),
    Plant(
        "request_order_within_zone",
        "ctxeng/engine/render.py",
        "    return (cand.rank if cand.rank is not None else 10**9, cand.item_id)\n",
        "    return (cand.order, cand.item_id)\n",
        "serialized order: the order candidates arrive in never changes the payload",
    ),
    Plant(
        "stable_prefix_sources_not_first",
        "ctxeng/engine/render.py",
        "    control.sort(key=lambda c: (c.item.source_type not in stable_sources, placement_key(c)))\n",
        "    control.sort(key=placement_key)\n",
        "serialized order: control text with the stable-prefix sources first",
    ),
    Plant(
        "tool_pairs_budgeted_in_source_order_not_rank",
        "ctxeng/engine/budget.py",
        "    pair_units.sort(key=lambda u: (u.rank, u.pair.source_order))  # type: ignore[union-attr]\n",
        "    pair_units.sort(key=lambda u: u.pair.source_order)  # type: ignore[union-attr]\n",
        "budget: two passes in rank order; a tool pair competes with its result's rank",
    ),
    Plant(
        "unresolved_pairs_budgeted_in_completion_order",
        "ctxeng/engine/budget.py",
        "    pair_units.sort(key=lambda u: (u.rank, u.pair.source_order))  # type: ignore[union-attr]\n",
        "    pair_units.sort(key=lambda u: (u.rank, u.pair.call.completed_seq or 0))  # type: ignore[union-attr]\n",
        "tool calls in assistant source order; completion order is recorded, never used",
    ),
    Plant(
        "call_tokens_not_counted",
        "ctxeng/engine/working.py",
        "        return self.call_base_tokens\n",
        "        return 0\n",
        "tokens add up: a tool pair's call is counted with its result",
    ),
    Plant(
        "fence_header_tokens_not_counted",
        "ctxeng/engine/render.py",
        "    return block_middle(cand, header)\n",
        "    return cand.content\n",
        "tokens add up: each fenced block's identity header is counted",
    ),
    Plant(
        "akia_secret_pattern_removed",
        "ctxeng/engine/secrets.py",
        "        aws.AWSKeyDetector(),\n",
        "",
        "secret_material: AKIA access keys are redacted",
    ),
    Plant(
        "pem_private_key_pattern_removed",
        "ctxeng/engine/secrets.py",
        "        private_key.PrivateKeyDetector(),\n",
        "",
        "secret_material: PEM private keys are redacted",
    ),
    # Neighbours of the 18: the same decisions reached by another wrong line.
    Plant(
        "sk_secret_pattern_removed",
        "ctxeng/engine/secrets.py",
        "        for m in _API_KEY.finditer(piece):\n",
        "        for m in _API_KEY.finditer(''):\n",
        "secret_material: sk- API keys are redacted",
    ),
    Plant(
        "fence_prefix_and_footer_not_counted",
        "ctxeng/engine/render.py",
        "    return fence_tokens(asm) if not is_plain(cand) and splits_fences(asm) else 0\n",
        "    return 0\n",
        "tokens add up: each fenced block's opening `<<<ctx` and end marker are counted",
    ),
    Plant(
        "tool_pairs_serialized_in_completion_order",
        "ctxeng/engine/structure.py",
        "    for order, call in enumerate(asm.request.tool_calls):\n",
        "    for order, call in enumerate(sorted(asm.request.tool_calls, key=lambda c: c.completed_seq or 0)):\n",
        "tool calls in assistant source order; completion order never changes the payload",
    ),
    # Issue 31: two survivors of the independent audit; the properties over `borrowed_minimum_cases()`
    # and `own_minimum_cases()` (tests/engine/test_properties.py) catch them, as do the pinned cases.
    Plant(
        "first_pass_admits_below_its_minimum_only",
        "ctxeng/engine/budget.py",
        "            if budget.sized(unit, room) and alloc.used[name] + unit.tokens <= cap:  # type: ignore[operator]\n",
        "            if budget.sized(unit, room) and alloc.used[name] + unit.tokens < cap:  # type: ignore[operator]\n",
        "budget pass 1 keeps an item whose tokens reach its partition's minimum exactly",
    ),
    Plant(
        "reservation_counts_the_partitions_own_minimum",
        "ctxeng/engine/budget.py",
        "        return sum(max(0, p.minimum - self.alloc.used[q]) for q, p in self.policy.partitions.items() if q != name)\n",
        "        return sum(max(0, p.minimum - self.alloc.used[q]) for q, p in self.policy.partitions.items())\n",
        "preserve_all_minimums reserves the other partitions' unused minimums, not the growing partition's own",
    ),
)

_IGNORE = shutil.ignore_patterns(".venv", ".git", "mutants", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules", "*.sqlite3")
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - |$)", re.M)


def plant(tree: Path, p: Plant) -> bool:
    """Apply one plant in `tree`; False when its `old` text does not occur exactly once (stale)."""
    path = tree / p.file
    text = path.read_text(encoding="utf-8")
    if text.count(p.old) != 1:
        return False
    path.write_text(text.replace(p.old, p.new), encoding="utf-8")
    return True


def run_tests(tree: Path) -> tuple[int, set[str]]:
    """Run tests/engine in `tree`; the exit code and the ids of the tests that failed or errored."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    where = subprocess.run(
        [sys.executable, "-c", "import ctxeng; print(ctxeng.__file__)"], cwd=tree, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the copy's tests would import {where}, not the planted copy in {tree}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "tests/engine"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    return proc.returncode, set(_FAILED.findall(proc.stdout))


def main(argv: list[str]) -> int:
    chosen = [p for p in PLANTS if not argv or p.name in argv]
    unknown = set(argv) - {p.name for p in PLANTS}
    if unknown:
        raise SystemExit(f"no such plant: {', '.join(sorted(unknown))}")
    outcomes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ctxeng-plant-") as tmp:
        # One snapshot of the work tree, so every plant is judged against the same engine and tests,
        # and a baseline run of it: a test already failing there (work in progress) catches nothing.
        snapshot = Path(tmp) / "snapshot"
        shutil.copytree(REPO, snapshot, ignore=_IGNORE)
        code, baseline = run_tests(snapshot)
        if code not in (0, 1):
            raise SystemExit(f"the unplanted tests did not run (pytest exited {code})")
        if baseline:
            print(f"baseline: {len(baseline)} test(s) already fail and are not counted: {', '.join(sorted(baseline))}", flush=True)
        for p in chosen:
            tree = Path(tmp) / p.name
            shutil.copytree(snapshot, tree)
            started = time.monotonic()
            if not plant(tree, p):
                outcomes[p.name] = "stale"
                print(f"STALE     {p.name}: {p.file} no longer holds the planted text once", flush=True)
                continue
            code, failed = run_tests(tree)
            took = time.monotonic() - started
            caught_by = sorted(failed - baseline)
            if code not in (0, 1):
                outcomes[p.name] = "error"
                print(f"ERROR     {p.name}: pytest exited {code}", flush=True)
            elif caught_by:
                outcomes[p.name] = "caught"
                shown = ", ".join(t.removeprefix("tests/engine/") for t in caught_by[:3])
                more = f" and {len(caught_by) - 3} more" if len(caught_by) > 3 else ""
                print(f"caught    {p.name} ({took:.0f}s) by {shown}{more}", flush=True)
            else:
                outcomes[p.name] = "survived"
                print(f"SURVIVED  {p.name} ({took:.0f}s): {p.breaks}", flush=True)
            shutil.rmtree(tree)
    caught = sum(1 for o in outcomes.values() if o == "caught")
    print(f"{caught} of {len(outcomes)} planted bugs caught")
    return 0 if caught == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
