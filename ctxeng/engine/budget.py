"""Stage 6b — the token budget, its partitions, and their eviction rules as actions (seed §5, §7).

Contract:

    usable = (min(model.context_limit, policy.model_context_limit)
              - response_reserve - protocol_overhead - safety_margin) / calibration factor

(rounded down) is split into the policy's partitions. The calibration factor is 1 for a model whose
count is exact and, for one whose count is an estimate, the margin `estimators` learned from the
model's usage reports (`budget.calibration`): the counts stay the encoding's, the room shrinks. Amounts may be shares of the context limit (`"12.5%"`,
`{fraction, min, max}`) and `model_context_limit` may be `model`: `resolve` turns them into tokens
once, at the start of an assembly, at the request's model size (the policy digest stays that of
the policy as written), so every stage sees tokens. A budget its shares cannot hold at that size
blocks: no usable input, a response reserve of 0 tokens (`required_partition_missing`, cause `budget_exhausted`), a minimum above its
partition's maximum or minimums beyond the usable input (`required_partition_missing`).

Each admitted item belongs to the partition that lists its kind (unlisted kinds go to the
partition evicted `first`, else the last one). A tool pair is one unit — call plus result, or call
plus its synthetic result — so it is kept or evicted whole.

Allocation walks units in rank order, in two passes. Pass 1 fills each partition up to its
minimum (never past its maximum). Pass 2 lets partitions grow toward their maximum, in eviction
order (`never` first, `first` last, so background is what goes first); under
`borrowing: preserve_all_minimums` a partition may only take space that leaves every other
partition's unused minimum intact. `borrowing: lend_unused_minimums` lends that unused room, except
to a web page no revision dates (`undated_web_page`): no gate can tell it is out of date, so it
keeps only the room `preserve_all_minimums` would give it. `borrowing: lend_unused_room` lends the
window by priority: right after the `never` partitions grow, the task-intent items (the user's turns) of every other
partition, then the tool pairs of the newest assistant turn (the evidence the current step depends
on), then the rest as above; a task-intent item is never displaced by another kind; and a third
pass lends what the window still has to the items the maximums held back (in growth order, rank
order), so a maximum never evicts while the window has room. Then each partition's eviction rule acts on what did not fit:

- `never`: nothing is silently evicted. An item that does not fit blocks the assembly
  (`required_partition_missing`, its detail headed `budget_exhausted:`, naming the partition and
  the item); it is recorded `budget_evicted`.
- `reduce_candidates`: evidence is dropped whole, lowest rank first. A higher-ranked item that
  did not fit takes the place of lower-ranked ones when dropping them (lowest first) makes it fit;
  no item is ever shortened to make room.
- `complete_pair_only`: a pair is kept or evicted whole; under `lend_unused_room`, like
  `reduce_candidates`, a higher-ranked pair that did not fit displaces lower-ranked pairs (whole)
  when that makes it fit. An evicted pair's call is handled like an
  unresolved call (policy `structure.unresolved_tool_calls`): it stays, answered by a short
  synthetic result saying the result was evicted, when that fits; otherwise it is left out. No
  call is ever serialized without a result.
- `structured_summary`: a state item that does not fit is first decision-compressed (its
  `Decision:`/`Reason:`/`Source:` lines, when `decision_compress` is allowed) if that fits; the
  rest are replaced by the deterministic structured checkpoint summary built from them and
  `request.checkpoint` (`transforms.structured_summary`), when `summarize` is allowed. When the
  summary does not fit the room they left, admitted state items (not of a resident kind, not
  `required`) are folded into it, lowest rank first, until it fits; when the summary of every evictable state item does not fit, the assembly
  is blocked (`required_partition_missing`, cause `budget_exhausted`, `missing` names the partition). The evicted and folded items
  record `replaced_by`.
- `first`: grows last, so it holds only what every other partition left; an item that does not
  fit is truncated to its newest whole turns when `truncate_item` is allowed, else evicted.

Each of these transforms runs only when `transforms.allowed` lists it and `transforms.trigger`
covers `over_partition`; its TransformRecord records `trigger: over_partition`.

The budget never admits an item the gates excluded: it only sees the living candidates.

Items left uncounted at acquisition (`acquisition.may_be_evicted_on_a_bound`) enter as units with
a proven lower bound (`floor_of`) and no count. Wherever a rule asks whether a unit fits, an
uncounted unit whose bound does not fit is answered "no" as it is; otherwise it is counted (and
its pending source limit applied, `source_limits.settle`) first. `_Budget.walk` keeps the rank
order exact for tie groups the ranking left unordered (`ranking.TieGroup`), and once its bounds
stop settling units it counts the next ones ahead on another core (AHEAD_AFTER): a guess that
changes no decision, only where the counts run.
"""

from __future__ import annotations

import dataclasses
import math
import os
from bisect import insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from . import source_limits, transforms
from .hashing import sha256_text
from .models import BudgetPolicy, ContextPolicy
from .ranking import is_pinned
from .render import (
    block_count_parts,
    block_floor,
    block_tokens,
    count_ahead,
    framing_reserve,
    header_json,
    settle_ahead,
)
from .source_limits import record_transform
from .structure import synthetic_result_text
from .vocabulary import (
    BlockedCause,
    BlockedReason,
    Borrowing,
    Eviction,
    ExclusionReason,
    Role,
    TransformTrigger,
    TransformType,
    UnresolvedCallHandling,
)
from .working import Assembly, Candidate, Exclusion, ToolPair

_EVICTION_ORDER = {
    Eviction.NEVER: 0,
    Eviction.STRUCTURED_SUMMARY: 1,
    Eviction.COMPLETE_PAIR_ONLY: 2,
    Eviction.REDUCE_CANDIDATES: 2,
    Eviction.FIRST: 3,
}
_UNRANKED = 10**9

# Counting ahead in a walk (`_Budget.walk`): once a walk has had to count AHEAD_AFTER units one by
# one (their bounds did not settle them), the next uncounted units whose bounds could fit are
# handed to the tokenizer's pool, AHEAD_FIRST of them and twice as many each time the walk
# reaches the end of those, so their counts run on the other cores while this thread reduces
# the one at hand. A guess: a count the walk does not ask for is let go of when the walk ends.
AHEAD_AFTER = 32
AHEAD_FIRST = 32
AHEAD_MAX = 1024
AHEAD_MIN_CHARS = 32_000
AHEAD_ITEM_CHARS = 2_000  # smaller items are counted when asked: a pool task costs more than their count
AHEAD_MAX_CHARS = 4_000_000  # text handed over at once, at most: never a second copy of a large request
AHEAD_CHUNK = 4
AHEAD_THREADS = 0  # threads counting ahead; 0: one less than the cores, this thread keeps one


@dataclass
class Unit:
    partition: str
    tokens: int | None  # exact; None until `_Budget.sized` counts it (an item left uncounted)
    item: Candidate | None = None
    pair: ToolPair | None = None
    admitted: bool = False
    floor: int = 0  # a proven lower bound of `tokens` while it is None (`bounds`)
    dropped: bool = False  # its pending source-limit reduction excluded the item

    @property
    def at_least(self) -> int:
        return self.tokens if self.tokens is not None else self.floor

    @property
    def label(self) -> str:
        return self.item.item_id if self.item else f"tool pair {self.pair.call.call_id}"  # type: ignore[union-attr]

    @property
    def rank(self) -> int:
        cand = self.item if self.item is not None else (self.pair.result if self.pair is not None and self.pair.resolved else None)
        return cand.rank if cand is not None and cand.rank is not None else _UNRANKED


@dataclass
class Allocation:
    usable: int  # what the partitions share: the usable input less the framing reserve
    context_limit: int
    usable_input: int = 0  # (context - response_reserve - protocol_overhead - safety_margin) / factor
    framing_reserved: int = 0
    uncalibrated_input: int = 0  # the same before the division by the calibration factor
    used: dict[str, int] = field(default_factory=dict)
    total: int = 0


def resolve(policy: ContextPolicy, model_context_limit: int) -> ContextPolicy:
    """`policy` with its budget in tokens for a model of `model_context_limit` tokens
    (`BudgetPolicy.resolved`); a policy whose budget is all tokens is returned as it is."""
    budget = policy.budget.resolved(model_context_limit)
    return policy if budget is policy.budget else policy.model_copy(update={"budget": budget})


def usable_budget(asm: Assembly) -> tuple[int, int]:
    """(usable input before calibration, the context limit)."""
    return _usable(asm.policy.budget, asm.request.model.context_limit)


def _usable(b: BudgetPolicy, model_context_limit: int) -> tuple[int, int]:
    """(usable input before calibration, the context limit) of a budget in tokens (`resolve`d)."""
    limit = min(model_context_limit, b.model_context_limit)  # type: ignore[type-var]
    return limit - b.response_reserve - b.protocol_overhead - b.safety_margin, limit  # type: ignore[operator]


def reserves_exceed_context(policy: ContextPolicy, model_context_limit: int) -> str | None:
    """`model.context_limit: ...` when a model of this size cannot hold what the policy reserves
    (response_reserve + protocol_overhead + safety_margin), else None.

    The engine blocks such an assembly (`required_partition_missing`, cause `budget_exhausted`) with a usable input below 0; the
    service, whose manifest rows hold the usable input as a count (never negative), refuses the
    request at submit with this message instead of accepting a job it could not store."""
    budget = policy.budget.resolved(model_context_limit)
    usable, limit = _usable(budget, model_context_limit)
    if usable >= 0:
        return None
    reserved = limit - usable
    return (f"model.context_limit: {model_context_limit} leaves no input under policy {policy.label}: at an effective "
            f"context limit of {limit}, response_reserve {budget.response_reserve} + protocol_overhead "
            f"{budget.protocol_overhead} + safety_margin {budget.safety_margin} reserve {reserved} tokens")


def calibrated(usable_input: int, factor: float) -> int:
    """The usable input a calibration `factor` leaves, rounded down (a factor of 1 changes nothing)."""
    return usable_input if factor == 1 or usable_input <= 0 else math.floor(usable_input / factor)


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


def floor_of(asm: Assembly, cand: Candidate) -> int:
    """A proven lower bound of the tokens `cand` takes if admitted: of its block as it is, and,
    when its source-limit reduction is pending, of any reduced form too (the fence, and the header
    without the two things a reduction changes in it: the content hash and the narrowed range)."""
    floor = block_floor(asm, cand)
    if cand.pending_limit is None:
        return floor
    _key, limit = cand.pending_limit
    ref = {k: v for k, v in cand.item.source_ref.items() if k not in source_limits.NARROWED_KEYS}
    header = header_json(cand, content_hash="", source_ref=ref)
    return min(floor, block_floor(asm, cand, header, body=source_limits.reduced_fixed_text(limit.default, cand)))


def build_units(asm: Assembly) -> list[Unit]:
    units: list[Unit] = []
    paired_results = {id(p.result) for p in asm.pairs if p.result is not None}
    for cand in asm.alive():
        if id(cand) in paired_results:
            continue
        cand.partition = partition_of_kind(asm, cand.item.kind)
        if cand.counted and cand.pending_limit is None:
            units.append(Unit(cand.partition, cand.tokens, item=cand))
        else:  # left uncounted at acquisition: sized only if a bound cannot settle it
            units.append(Unit(cand.partition, None, item=cand, floor=floor_of(asm, cand)))
    pair_part = pair_partition(asm)
    pair_units = []
    for pair in asm.pairs:
        if not pair.resolved and pair.synthetic_result is None:
            continue  # left out entirely (policy: omit_call): nothing to serialize, nothing to budget
        if pair.resolved:
            pair.result.partition = pair_part  # type: ignore[union-attr]
        pair_units.append(Unit(pair_part, pair.tokens, pair=pair))
    # Pairs compete in their result's rank order; unresolved calls keep assistant source order after them.
    pair_units.sort(key=lambda u: (u.rank, u.pair.source_order))  # type: ignore[union-attr]
    return units + pair_units


def _tie_group(unit: Unit):
    return getattr(unit.item, "tie_group", None)


class _Budget:
    """The running allocation: what each partition and the whole input have used so far."""

    def __init__(self, asm: Assembly, alloc: Allocation) -> None:
        self.asm = asm
        self.policy = asm.policy.budget
        self.alloc = alloc
        self.counted_one_by_one = 0  # units `sized` had to count

    soft_maximums = False  # set once every partition grew to its maximum, under lend_unused_room

    def cap(self, name: str) -> int:
        part = self.policy.partitions[name]
        return part.maximum if part.maximum is not None and not self.soft_maximums else self.alloc.usable

    def not_lent_to(self, unit: Unit | None) -> bool:
        """Under `lend_unused_minimums`, is `unit` one the unused minimums are not lent to (an
        undated web page, `undated_web_page`)?"""
        return unit is not None and self.policy.borrowing == Borrowing.LEND_UNUSED_MINIMUMS and undated_web_page(unit)

    def reserved_for_others(self, name: str, unit: Unit | None = None) -> int:
        if self.policy.borrowing != Borrowing.PRESERVE_ALL_MINIMUMS and not self.not_lent_to(unit):
            return 0
        return sum(max(0, p.minimum - self.alloc.used[q]) for q, p in self.policy.partitions.items() if q != name)

    def fits(self, name: str, tokens: int, freed: int = 0, unit: Unit | None = None) -> bool:
        """Would `tokens` more fit partition `name` (after `freed` were given back)? `unit`: the
        unit asking, when lending depends on what it is."""
        return (
            self.alloc.used[name] - freed + tokens <= self.cap(name)
            and self.alloc.total - freed + tokens <= self.alloc.usable - self.reserved_for_others(name, unit)
        )

    def sized(self, unit: Unit, could_fit: Callable[[int], bool]) -> bool:
        """Does `unit` have an exact size now? An uncounted item is counted (and reduced, if its
        source limit is pending) only when its lower bound passes `could_fit`; an item its
        reduction excluded (a failed assertion) is dropped from the budget. False: the bound
        alone shows it cannot fit, or it is gone."""
        if unit.tokens is not None:
            return True
        cand = unit.item
        assert cand is not None
        if not could_fit(unit.floor):
            return False
        self.counted_one_by_one += 1
        source_limits.settle(self.asm, cand)
        if not cand.alive:
            unit.dropped = True
            return False
        unit.tokens = cand.tokens
        return True

    def walk(self, units: list[Unit], could_fit: Callable[[Unit, int], bool]) -> Iterator[Unit]:
        """`units` (in rank order) as the budget visits them. The uncounted members of a tie group
        the ranking left unordered (`ranking.TieGroup`) are one run of the list: skipped whole
        when no member's lower bound passes `could_fit` (nothing is admitted while they are
        skipped, so their order cannot matter), else ordered by the ranks their counts give
        them, in this list, before any of them is visited."""
        i = 0
        start, ahead_to, ahead_size, ahead = self.counted_one_by_one, 0, AHEAD_FIRST, []
        try:
            while i < len(units):
                if i >= ahead_to and self.counted_one_by_one - start >= AHEAD_AFTER:
                    keys, ahead_to = self._count_ahead(units, i, i + ahead_size, could_fit)
                    ahead += keys
                    ahead_size = min(2 * ahead_size, AHEAD_MAX)
                group = _tie_group(units[i])
                if group is None:
                    yield units[i]
                    i += 1
                    continue
                j = i + 1
                while j < len(units) and _tie_group(units[j]) is group:
                    j += 1
                if not group.resolved and any(could_fit(u, u.floor) for u in units[i:j] if not u.admitted and not u.dropped):
                    group.resolve()
                if group.resolved:
                    units[i:j] = sorted(units[i:j], key=lambda u: u.rank)
                    yield from units[i:j]
                i = j
        finally:  # the counts started ahead and not asked for: those done are kept, the rest let go
            if ahead:
                settle_ahead(self.asm, ahead, wait=False)

    def _count_ahead(self, units: list[Unit], start: int, stop: int, could_fit: Callable[[Unit, int], bool]) -> tuple[list[str], int]:
        """Start counting, on the tokenizer's pool, the uncounted units of `units[start:stop]`
        whose bounds pass `could_fit` now (the walk's room only shrinks, so the others will not
        be counted), up to AHEAD_MAX_CHARS of text. Their keys, and where the next guess starts."""
        texts: list[tuple[str | None, str]] = []
        size, end = 0, min(stop, len(units))
        for n in range(start, end):
            u = units[n]
            if (u.tokens is None and not u.dropped and u.item is not None
                    and len(u.item.content) >= AHEAD_ITEM_CHARS and could_fit(u, u.floor)):
                texts.append(block_count_parts(self.asm, u.item))
                size += len(texts[-1][1])
                if size >= AHEAD_MAX_CHARS:
                    end = n + 1
                    break
        threads = AHEAD_THREADS or max(1, (os.cpu_count() or 1) - 1)
        return count_ahead(self.asm, texts, min_chars=AHEAD_MIN_CHARS, chunk=AHEAD_CHUNK, threads=threads), end

    def unit_fits(self, name: str, unit: Unit, freed: int = 0) -> bool:
        return self.sized(unit, lambda n: self.fits(name, n, freed, unit)) and self.fits(name, unit.tokens, freed, unit)  # type: ignore[arg-type]

    def take(self, name: str, tokens: int) -> None:
        self.alloc.used[name] += tokens
        self.alloc.total += tokens

    def room(self, name: str) -> int:
        return min(self.cap(name) - self.alloc.used[name], self.alloc.usable - self.reserved_for_others(name) - self.alloc.total)

    def give_back(self, name: str, tokens: int) -> None:
        self.alloc.used[name] -= tokens
        self.alloc.total -= tokens

    def why_not(self, name: str, tokens: int, *, bound: bool = False, unit: Unit | None = None) -> str:
        needs = f"item needs at least {tokens} (a lower bound; not counted)" if bound else f"item needs {tokens}"
        if self.alloc.used[name] + tokens > self.cap(name) and not self.soft_maximums:
            return f"partition {name!r} full: {self.alloc.used[name]} used of maximum {self.cap(name)}, {needs}"
        if self.not_lent_to(unit):
            return (f"usable budget exhausted: {self.alloc.total} of {self.alloc.usable} used, {needs} (unused minimums of "
                    "other partitions are not lent to a web page without a revision: nothing states its version)")
        return f"usable budget exhausted: {self.alloc.total} of {self.alloc.usable} used, {needs}" + (
            " (unused minimums of other partitions are preserved)"
            if self.policy.borrowing == Borrowing.PRESERVE_ALL_MINIMUMS
            else ""
        )


def allocate(asm: Assembly, *, calibration_factor: float = 1.0) -> Allocation:
    try:
        return _allocate(asm, calibration_factor)
    finally:
        # Tie groups the walk ordered have their final ranks now; later stages read candidates in
        # rank order. The groups are done with (and a group and its members refer to each other).
        for cand in asm.candidates:
            cand.tie_group = None
        asm.candidates.sort(key=lambda c: (c.rank is None, c.rank or 0, c.order))


def _allocate(asm: Assembly, factor: float) -> Allocation:
    policy = asm.policy.budget
    uncalibrated, limit = usable_budget(asm)
    usable_input = calibrated(uncalibrated, factor)
    # The text ctxeng adds around the items (notice, separators, tool definitions) is paid for
    # first, so the whole payload, not only the items, stays within the usable input.
    framing = framing_reserve(asm) if usable_input > 0 else 0
    usable = usable_input - framing
    alloc = Allocation(usable=usable, context_limit=limit, usable_input=usable_input, framing_reserved=framing,
                       uncalibrated_input=uncalibrated, used={name: 0 for name in policy.partitions})
    total_min = sum(p.minimum for p in policy.partitions.values())
    units = build_units(asm)
    if usable <= 0:
        why = (
            f"usable budget {usable_input} (less {framing} framing): context {limit} (min of the model's {asm.request.model.context_limit} and budget.model_context_limit "
            f"{policy.model_context_limit}) - response_reserve {policy.response_reserve} - protocol_overhead {policy.protocol_overhead} "
            f"- safety_margin {policy.safety_margin}{'' if factor == 1 else f', divided by the calibration factor {factor}'} leaves no room for any input"
        )
        asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, ["budget.usable_input"], why, BlockedCause.BUDGET_EXHAUSTED)
        for unit in units:
            _evict(asm, unit, why)
        return alloc
    # Only a budget written in shares can come to these at a model size (the validators refuse
    # them in tokens): a share of a small window rounds a reserve to 0, or a token minimum
    # passes a share maximum.
    if policy.response_reserve < 1:
        why = f"response_reserve comes to 0 tokens at context {limit}; a provider call needs at least one for the answer"
        asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, ["budget.response_reserve"], why, BlockedCause.BUDGET_EXHAUSTED)
        for unit in units:
            _evict(asm, unit, why)
        return alloc
    inverted = [n for n, p in policy.partitions.items() if p.maximum is not None and p.minimum > p.maximum]
    if inverted:
        why = f"at context {limit} the minimum of partition(s) {', '.join(inverted)} exceeds the maximum: " + ", ".join(
            f"{n} {policy.partitions[n].minimum} > {policy.partitions[n].maximum}" for n in inverted
        )
        asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, inverted, why)
        for unit in units:
            _evict(asm, unit, why)
        return alloc
    if total_min > usable:
        short = [n for n, p in policy.partitions.items() if p.minimum > 0]
        why = f"usable budget {usable} (model context {asm.request.model.context_limit}, less {framing} tokens of framing) cannot hold the partition minimums ({total_min})"
        asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, short, why)
        for unit in units:
            _evict(asm, unit, why)
        return alloc

    budget = _Budget(asm, alloc)
    by_part: dict[str, list[Unit]] = {name: [] for name in policy.partitions}
    for unit in units:
        by_part[unit.partition].append(unit)

    # Pass 1: guaranteed minimums.
    for name, part in policy.partitions.items():
        cap = min(part.minimum, part.maximum) if part.maximum is not None else part.minimum
        room = lambda n, name=name, cap=cap: alloc.used[name] + n <= cap  # noqa: E731
        for unit in budget.walk(by_part[name], lambda u, n, room=room: room(n)):
            if budget.sized(unit, room) and alloc.used[name] + unit.tokens <= cap:  # type: ignore[operator]
                unit.admitted = True
                budget.take(name, unit.tokens)  # type: ignore[arg-type]

    # Pass 2: growth toward maximums, borrowing under the policy's rule; `first` grows last. The
    # task as the user states it (task_intent items: the user's turns) grows before anything else
    # does, so no partition's growth (older evidence, background) takes the room of what the user
    # said, the newest correction included.
    order = growth_order(policy)
    never = [n for n in order if policy.partitions[n].eviction == Eviction.NEVER]
    sweeps = [(name, by_part[name]) for name in never]  # what may never be evicted grows first
    by_priority = policy.borrowing == Borrowing.LEND_UNUSED_ROOM
    if by_priority:
        sweeps += [(name, [u for u in by_part[name] if _task_intent(u)]) for name in order if name not in never]
    # Then the evidence the current step depends on: the results of the newest assistant turn's calls.
    newest = max((u.pair.call.turn for u in units if u.pair is not None and u.pair.call.turn is not None), default=None)
    if by_priority and newest is not None:
        sweeps += [(name, [u for u in by_part[name] if u.pair is not None and u.pair.call.turn == newest])
                   for name in order if name not in never]
    sweeps += [(name, by_part[name]) for name in order if name not in never]
    for name, members in sweeps:
        for unit in budget.walk(members, lambda u, n, name=name: budget.fits(name, n, unit=u)):
            if not unit.admitted and not unit.dropped and budget.unit_fits(name, unit):
                unit.admitted = True
                budget.take(name, unit.tokens)  # type: ignore[arg-type]
    if policy.borrowing == Borrowing.LEND_UNUSED_ROOM:
        # Pass 3: a maximum does not evict while the window has room: what is left is lent to the
        # partitions whose items did not fit, in growth order (`first` last), in rank order.
        budget.soft_maximums = True
        for name in order:
            left = [u for u in by_part[name] if not u.admitted and not u.dropped]
            for unit in budget.walk(left, lambda u, n, name=name: budget.fits(name, n)):
                if not unit.admitted and not unit.dropped and budget.unit_fits(name, unit):
                    unit.admitted = True
                    budget.take(name, unit.tokens)  # type: ignore[arg-type]

    # The eviction rules act on what did not fit.
    for name in order:
        part = policy.partitions[name]
        # A pair is kept or evicted whole, and by rank like evidence: a higher-ranked pair the
        # minimum's fill order left out (too big for the minimum, say the newest result) displaces
        # lower-ranked pairs, whole, rather than being evicted while older results hold its room.
        if part.eviction == Eviction.REDUCE_CANDIDATES or (part.eviction == Eviction.COMPLETE_PAIR_ONLY and policy.borrowing == Borrowing.LEND_UNUSED_ROOM):
            _drop_lowest_ranked_first(budget, name, by_part[name])
    for name in order:
        part = policy.partitions[name]
        left = [u for u in by_part[name] if not u.admitted and not u.dropped]
        rule = f"eviction rule {part.eviction.value}"
        if part.eviction == Eviction.NEVER:
            for unit in left:
                why = budget.why_not(name, unit.at_least, bound=unit.tokens is None)
                asm.block(
                    BlockedReason.REQUIRED_PARTITION_MISSING,
                    [unit.label],
                    f"partition {name!r} (eviction never) cannot hold {unit.label}: {why}",
                    BlockedCause.BUDGET_EXHAUSTED,
                )
                _evict(asm, unit, f"{why}; {rule}: the assembly is blocked rather than evict it")
            continue
        if part.eviction in (Eviction.STRUCTURED_SUMMARY, Eviction.FIRST):
            # State may first be decision-compressed, background truncated to its newest turns.
            ttype = TransformType.DECISION_COMPRESS if part.eviction == Eviction.STRUCTURED_SUMMARY else TransformType.TRUNCATE_ITEM
            if asm.policy.transforms.runs(ttype, TransformTrigger.OVER_PARTITION):
                can_shorten = lambda u, n, name=name, ttype=ttype: u.item is not None and _may_shorten(budget, name, u.item, ttype)  # noqa: E731
                for unit in budget.walk(left, can_shorten):
                    # A shorter form is made from the item as the source limits leave it.
                    if can_shorten(unit, 0) and budget.sized(unit, lambda n: True):
                        _shorten(asm, budget, name, unit, ttype)
                left = [u for u in left if not u.admitted and (u.item is None or u.item.alive)]
        if part.eviction == Eviction.STRUCTURED_SUMMARY and left:
            _replace_by_structured_summary(asm, budget, name, by_part[name], left, rule)
            continue
        for unit in left:
            why = budget.why_not(name, unit.at_least, bound=unit.tokens is None, unit=unit)
            if unit.pair is not None:
                _evict_pair(asm, budget, name, unit, f"{why}; {rule}")
            else:
                _evict(asm, unit, f"{why}; {rule}")
    for unit in units:
        if unit.admitted and unit.pair is not None:
            unit.pair.included = True
    return alloc


def _task_intent(unit: Unit) -> bool:
    return unit.item is not None and unit.item.role == Role.TASK_INTENT


def undated_web_page(unit: Unit) -> bool:
    """A web page whose version nothing in the request states: an item of source type
    `web_document`, or a tool result whose source_ref names a `url` (a tool declared
    `sdk.reads("url")`), without a `revision` (its ETag, Last-Modified or publication date, as the
    caller read it). No gate can tell such a page is out of date, so `lend_unused_minimums` does not
    lend it room: it keeps what `preserve_all_minimums` would give it."""
    cand = unit.item if unit.item is not None else (unit.pair.result if unit.pair is not None else None)
    if cand is None:
        return False
    item = cand.item
    return item.revision is None and (item.source_type == "web_document" or "url" in item.source_ref)


def final_usage(asm: Assembly, included: list[Candidate]) -> tuple[dict[str, int], dict[str, int]]:
    """Tokens and item counts per partition, from the final included set (what the payload
    carries), not from the allocation. Every tool pair lives in the one pair partition."""
    parts = asm.policy.budget.partitions
    used = {name: 0 for name in parts}
    counts = {name: 0 for name in parts}
    for cand in included:
        if cand.partition:
            used[cand.partition] += cand.tokens
            counts[cand.partition] += 1
    pair_part = pair_partition(asm)
    for pair in asm.pairs:
        if pair.included:
            used[pair_part] += pair.call_tokens + (0 if pair.resolved else pair.synthetic_tokens)
    return used, counts


def growth_order(policy) -> list[str]:
    """Partitions in the order they grow past their minimums: `never` first, `first` last."""
    return sorted(policy.partitions, key=lambda n: _EVICTION_ORDER[policy.partitions[n].eviction])


def borrowed_by_partition(policy, usable: int, used: dict[str, int]) -> dict[str, int]:
    """What each partition took from other partitions' minimums, from the final usage.

    The free pool is what the minimums leave of `usable`. Usage above a partition's own minimum
    comes from that pool first, partitions drawing on it in growth order; only what is left over
    was taken from the minimum another partition left unused (possible under
    `lend_unused_minimums`; under `preserve_all_minimums` it is always 0)."""
    pool = max(0, usable - sum(p.minimum for p in policy.partitions.values()))
    out = {}
    for name in growth_order(policy):
        above = max(0, used[name] - policy.partitions[name].minimum)
        from_pool = min(above, pool)
        pool -= from_pool
        out[name] = above - from_pool
    return out


def _drop_lowest_ranked_first(budget: _Budget, name: str, units: list[Unit]) -> None:
    """`reduce_candidates`: a higher-ranked unit that did not fit displaces lower-ranked ones, lowest first.

    The admitted units are kept in one list sorted by rank, so the lowest-ranked ones are its tail:
    each waiting unit walks the tail only while it outranks it (no re-sorting per unit)."""
    # What the user said (task intent) is displaced only by task intent: a higher-ranked reply or
    # result never takes a user turn's room (it grew first for that reason, `_allocate`).
    by_priority = budget.policy.borrowing == Borrowing.LEND_UNUSED_ROOM
    admitted = sorted((u for u in units if u.admitted and not (by_priority and _task_intent(u))), key=lambda u: u.rank)
    rank = {id(u): u.rank for u in admitted}

    def could_fit(unit: Unit, n: int) -> bool:  # if every admitted unit it outranks were dropped
        freeable = 0
        for victim in reversed(admitted):
            if rank[id(victim)] <= unit.rank:
                break
            freeable += victim.tokens  # type: ignore[operator]
        return budget.fits(name, n, freeable, unit)

    waiting = sorted((u for u in units if not u.admitted and not u.dropped), key=lambda u: u.rank)
    for unit in budget.walk(waiting, could_fit):
        if unit.dropped or (unit.tokens is None and not budget.sized(unit, lambda n, unit=unit: could_fit(unit, n))):
            continue
        rank[id(unit)] = mine = unit.rank
        victims: list[Unit] = []
        freed = 0
        for victim in reversed(admitted):
            if rank[id(victim)] <= mine or budget.fits(name, unit.tokens, freed, unit):
                break
            victims.append(victim)
            freed += victim.tokens
        if victims and budget.fits(name, unit.tokens, freed, unit):
            for victim in victims:
                victim.admitted = False
                budget.give_back(name, victim.tokens)
            del admitted[len(admitted) - len(victims):]
            unit.admitted = True
            budget.take(name, unit.tokens)
            insort(admitted, unit, key=lambda u: rank[id(u)])


def _may_shorten(budget: _Budget, name: str, cand: Candidate, ttype: TransformType) -> bool:
    """False when `_shorten` would certainly make nothing: truncation with no room for even an
    empty block (`transforms.truncate_turns`'s own first test), so the item need not be counted."""
    return ttype != TransformType.TRUNCATE_ITEM or transforms.may_truncate(cand, budget.room(name))


def _shorten(asm: Assembly, budget: _Budget, name: str, unit: Unit, ttype: TransformType) -> None:
    """Admit an item that did not fit in a shorter, checked form, when that form fits."""
    cand = unit.item
    assert cand is not None
    if ttype == TransformType.TRUNCATE_ITEM:
        made = transforms.truncate_turns(asm, cand, budget.room(name))
    else:
        made = transforms.decision_compress(cand)
    if made is None:
        return
    out, ref = made
    shorter = cand.item.model_copy(update={"content": out, "content_hash": sha256_text(out), "source_ref": ref})
    tokens = block_tokens(asm, dataclasses.replace(cand, item=shorter, content=out, changed_digest=shorter.content_hash))
    if not budget.fits(name, tokens):
        return
    if ttype == TransformType.TRUNCATE_ITEM:
        assertions = transforms.check_truncation(cand, out, ref)
        objective, version = "keep_the_newest_whole_turns", transforms.TRUNCATE_TRANSFORMER
    else:
        assertions = transforms.check_decision_compression(cand, out)
        objective, version = "keep_decisions_reasons_and_source_refs", transforms.COMPRESS_TRANSFORMER
    record_transform(asm, cand, out, assertions, ttype, objective, version, narrowed_ref=ref, trigger=TransformTrigger.OVER_PARTITION.value, stage="budget")
    if cand.alive:
        unit.admitted = True
        unit.tokens = cand.tokens
        budget.take(name, cand.tokens)


def _replace_by_structured_summary(asm: Assembly, budget: _Budget, name: str, units: list[Unit], left: list[Unit], rule: str) -> None:
    """`structured_summary`: the items in `left` are replaced by their structured summary. When the
    summary does not fit the room they left, admitted items of the partition (not of a resident kind,
    not `required`) are folded into it, lowest rank first, until it does (each folded item frees more than the line that names it);
    when even the summary of every evictable item does not fit, the assembly is blocked
    (`required_partition_missing`, cause `budget_exhausted`, `missing` names the partition): state is never dropped unsummarised."""
    evicted = [u.item for u in left if u.item is not None]
    why = {u.label: budget.why_not(name, u.at_least, bound=u.tokens is None) for u in left}
    policy = asm.policy.transforms
    replaced_by = None
    note = ""
    if not policy.runs(TransformType.SUMMARIZE, TransformTrigger.OVER_PARTITION):
        note = (
            "; no structured summary: transforms.allowed has no 'summarize'"
            if TransformType.SUMMARIZE not in policy.allowed
            else f"; no structured summary: transforms.trigger {policy.trigger.value!r} leaves out over_partition"
        )
    elif evicted:
        summary, record = transforms.structured_summary(asm, evicted, partition=name)
        folded: list[Unit] = []
        freed = 0
        # Evictable: admitted items of the partition that are not pinned (required, a resident kind
        # — `include` or `when_present` —, control, or what the stage requires: ranking.is_pinned),
        # so a pinned item within its partition's minimum is never folded away (seed §5).
        foldable = sorted(
            (u for u in units if u.admitted and u.item is not None and not is_pinned(asm, u.item)),
            key=lambda u: u.rank,
            reverse=True,
        )
        while record.status != "blocked" and not budget.fits(name, summary.tokens, freed) and foldable:
            victim = foldable.pop(0)
            bigger, bigger_record = transforms.structured_summary(asm, [*evicted, *(u.item for u in folded), victim.item], partition=name)
            if bigger_record.status == "blocked":
                continue  # folding this one would fail an assertion (a trust it cannot carry): it stays
            folded.append(victim)
            freed += victim.tokens  # type: ignore[operator]
            summary, record = bigger, bigger_record
        if record.status == "blocked":
            transforms.record_structured_summary(asm, summary, record)
            note = f"; the structured summary {summary.item_id} failed its assertions"
        elif budget.fits(name, summary.tokens, freed):
            for unit in folded:
                unit.admitted = False
                budget.give_back(name, unit.tokens)  # type: ignore[arg-type]
                why[unit.label] = f"admitted, then folded into the structured summary (lowest rank first) to make room for it in partition {name!r}"
            left = [*left, *folded]
            transforms.record_structured_summary(asm, summary, record)
            budget.take(name, summary.tokens)
            replaced_by = summary.item_id
            note = f"; replaced by the structured summary {summary.item_id}"
        else:
            room = budget.room(name) + freed
            detail = (
                f"partition {name!r} (eviction structured_summary): the structured summary of every evictable state item "
                f"({summary.tokens} tokens) does not fit the {room} tokens left; state is never dropped unsummarised"
            )
            asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, [name], detail, BlockedCause.BUDGET_EXHAUSTED)
            note = f"; the structured summary of every evictable state item ({summary.tokens} tokens) did not fit either: the assembly is blocked"
    for unit in left:
        detail = f"{why[unit.label]}; {rule}{note}"
        if unit.pair is not None:
            _evict_pair(asm, budget, name, unit, detail)
        else:
            _evict(asm, unit, detail, replaced_by=replaced_by)


def _evict(asm: Assembly, unit: Unit, detail: str, replaced_by: str | None = None) -> None:
    ex = Exclusion(ExclusionReason.BUDGET_EVICTED, detail, "budget")
    ex.replaced_by = replaced_by
    if unit.tokens is None:
        ex.tokens_at_least = unit.floor  # evicted on its bound, never counted
    if unit.item is not None:
        unit.item.exclude(ex)
    elif unit.pair is not None:
        unit.pair.included = False
        unit.pair.evicted = True
        if unit.pair.result is not None:
            unit.pair.result.exclude(Exclusion(ExclusionReason.BUDGET_EVICTED, detail + " (evicted with its call, as one pair)", "budget"))


def _evict_pair(asm: Assembly, budget: _Budget, name: str, unit: Unit, detail: str) -> None:
    """Evict a pair whole; its call is then handled like an unresolved call, never left orphaned."""
    pair = unit.pair
    assert pair is not None
    _evict(asm, unit, detail)
    handling = asm.policy.structure.unresolved_tool_calls
    pair.unresolved_handling = handling
    if handling != UnresolvedCallHandling.SYNTHETIC_RESULT:
        return  # omit_call: the call is left out with its result
    if pair.result is not None:
        why = f"result {pair.result.item_id} was evicted by the token budget (partition {name!r}); fetch it by its ref if needed"
    else:
        why = f"this call was evicted by the token budget (partition {name!r})"
    text = synthetic_result_text(pair.call.call_id, why)
    tokens = asm.tokenizer.count(text)
    if budget.fits(name, pair.call_tokens + tokens):
        pair.synthetic_result = text
        pair.synthetic_tokens = tokens
        pair.included = True
        budget.take(name, pair.call_tokens + tokens)
    else:
        pair.unresolved_handling = UnresolvedCallHandling.OMIT_CALL
        pair.synthetic_result = None
