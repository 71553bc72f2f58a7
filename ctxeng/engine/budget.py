"""Stage 6b — the token budget and its partitions (seed §5).

Contract:

    usable = min(model.context_limit, policy.model_context_limit)
             - response_reserve - protocol_overhead - safety_margin

is split into the policy's partitions. Each admitted item belongs to the partition that lists its
kind (unlisted kinds go to the partition evicted `first`, else the last one). A tool pair is one
unit — call plus result, or call plus its synthetic result — so it is kept or evicted whole.

Allocation walks units in rank order, in two passes. Pass 1 fills each partition up to its
minimum (never past its maximum). Pass 2 lets partitions grow toward their maximum, in eviction
order (`never` first, `first` last); under `borrowing: preserve_all_minimums` a partition may only
take space that leaves every other partition's unused minimum intact. Both passes keep going past
a unit that does not fit. Units left over are `budget_evicted`. The budget never admits an item the
gates excluded: it only sees the living candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .vocabulary import BlockedReason, Borrowing, Eviction, ExclusionReason
from .working import Assembly, Candidate, Exclusion, ToolPair

_EVICTION_ORDER = {
    Eviction.NEVER: 0,
    Eviction.STRUCTURED_SUMMARY: 1,
    Eviction.COMPLETE_PAIR_ONLY: 2,
    Eviction.REDUCE_CANDIDATES: 2,
    Eviction.FIRST: 3,
}


@dataclass
class Unit:
    partition: str
    tokens: int
    item: Candidate | None = None
    pair: ToolPair | None = None
    admitted: bool = False

    @property
    def label(self) -> str:
        return self.item.item_id if self.item else f"tool pair {self.pair.call.call_id}"  # type: ignore[union-attr]


@dataclass
class Allocation:
    usable: int
    context_limit: int
    used: dict[str, int] = field(default_factory=dict)


def usable_budget(asm: Assembly) -> tuple[int, int]:
    b = asm.policy.budget
    limit = min(asm.request.model.context_limit, b.model_context_limit)
    return limit - b.response_reserve - b.protocol_overhead - b.safety_margin, limit


def partition_of_kind(asm: Assembly, kind: str) -> str:
    parts = asm.policy.budget.partitions
    for name, part in parts.items():
        if kind in part.kinds:
            return name
    for name, part in parts.items():
        if part.eviction == Eviction.FIRST:
            return name
    return list(parts)[-1]


def pair_partition(asm: Assembly) -> str:
    parts = asm.policy.budget.partitions
    for kind in ("tool_result", "tool_call"):
        for name, part in parts.items():
            if kind in part.kinds:
                return name
    return partition_of_kind(asm, "tool_result")


def build_units(asm: Assembly) -> list[Unit]:
    units: list[Unit] = []
    paired_results = {id(p.result) for p in asm.pairs if p.result is not None}
    for cand in asm.alive():
        if id(cand) in paired_results:
            continue
        cand.partition = partition_of_kind(asm, cand.item.kind)
        units.append(Unit(cand.partition, cand.tokens, item=cand))
    pair_part = pair_partition(asm)
    pair_units = []
    for pair in asm.pairs:
        if not pair.resolved and pair.synthetic_result is None:
            continue  # left out entirely (policy: omit_call): nothing to serialize, nothing to budget
        if pair.resolved:
            pair.result.partition = pair_part  # type: ignore[union-attr]
        pair_units.append(Unit(pair_part, pair.tokens, pair=pair))
    # Pairs compete in their result's rank order; unresolved calls keep assistant source order after them.
    pair_units.sort(key=lambda u: (u.pair.result.rank if u.pair.resolved and u.pair.result.rank else 10**9, u.pair.source_order))  # type: ignore[union-attr]
    return units + pair_units


def allocate(asm: Assembly) -> Allocation:
    policy = asm.policy.budget
    usable, limit = usable_budget(asm)
    alloc = Allocation(usable=usable, context_limit=limit, used={name: 0 for name in policy.partitions})
    total_min = sum(p.minimum for p in policy.partitions.values())
    units = build_units(asm)
    if usable <= 0 or total_min > usable:
        short = [n for n, p in policy.partitions.items() if p.minimum > 0]
        asm.block(
            BlockedReason.REQUIRED_PARTITION_MISSING,
            short,
            f"usable budget {usable} (model context {asm.request.model.context_limit}) cannot hold the partition minimums ({total_min})",
        )
        for unit in units:
            _evict(asm, unit, f"usable budget {usable} cannot hold the partition minimums ({total_min})")
        return alloc

    by_part: dict[str, list[Unit]] = {name: [] for name in policy.partitions}
    for unit in units:
        by_part[unit.partition].append(unit)
    total = 0

    # Pass 1: guaranteed minimums.
    for name, part in policy.partitions.items():
        cap = min(part.minimum, part.maximum) if part.maximum is not None else part.minimum
        for unit in by_part[name]:
            if alloc.used[name] + unit.tokens <= cap:
                unit.admitted = True
                alloc.used[name] += unit.tokens
                total += unit.tokens

    # Pass 2: growth toward maximums, borrowing under the policy's rule.
    order = sorted(policy.partitions, key=lambda n: _EVICTION_ORDER[policy.partitions[n].eviction])
    for name in order:
        part = policy.partitions[name]
        cap = part.maximum if part.maximum is not None else usable
        for unit in by_part[name]:
            if unit.admitted:
                continue
            reserved = 0
            if policy.borrowing == Borrowing.PRESERVE_ALL_MINIMUMS:
                reserved = sum(
                    max(0, p.minimum - alloc.used[q]) for q, p in policy.partitions.items() if q != name
                )
            if alloc.used[name] + unit.tokens <= cap and total + unit.tokens <= usable - reserved:
                unit.admitted = True
                alloc.used[name] += unit.tokens
                total += unit.tokens

    for name, part in policy.partitions.items():
        cap = part.maximum if part.maximum is not None else usable
        for unit in by_part[name]:
            if unit.admitted:
                if unit.pair is not None:
                    unit.pair.included = True
                continue
            if alloc.used[name] + unit.tokens > cap:
                why = f"partition {name!r} full: {alloc.used[name]} used of maximum {cap}, item needs {unit.tokens}"
            else:
                why = (
                    f"usable budget exhausted: {total} of {usable} used, item needs {unit.tokens}"
                    + (" (unused minimums of other partitions are preserved)" if policy.borrowing == Borrowing.PRESERVE_ALL_MINIMUMS else "")
                )
            _evict(asm, unit, f"{why}; eviction rule {part.eviction.value}")
    return alloc


def _evict(asm: Assembly, unit: Unit, detail: str) -> None:
    ex = Exclusion(ExclusionReason.BUDGET_EVICTED, detail, "budget")
    if unit.item is not None:
        unit.item.exclude(ex)
    elif unit.pair is not None:
        unit.pair.included = False
        unit.pair.evicted = True
        if unit.pair.result is not None:
            unit.pair.result.exclude(Exclusion(ExclusionReason.BUDGET_EVICTED, detail + " (evicted with its call, as one pair)", "budget"))
