"""Stage 3 — ranking of eligible items (seed §2: relevance orders only the legal candidates).

Contract: only items that passed every hard gate are ranked. Resident kinds (policy
`resident.include`, and `resident.when_present` kinds when the request carries one), required items and the control zone are pinned ahead of everything else and
never lose ranking. The rest are ordered by the policy's `admission.ranking` factors, in the order
listed, with `item_id` as the final deterministic tie-break. An item loses ranking (`ranking_lost`)
when it serves none of the current stages, when its relevance is below `admission.min_relevance`,
or when a higher-ranked eligible item carries the same content hash (a duplicate; a tool result or a
conversation turn never is one: words repeated in a history are repeated events). A reading that a
later eligible reading of the same object covers, the same where they overlap, is excluded as
`duplicate` (ctxeng.engine.versions), naming the covering item. Ranking never
evicts for budget: the budget stage walks this order and keeps going past items that do not fit.

Before any of that, the policy's `retrieval` clause applies to every eligible item, pinned or not: a
diagnostic source (traces) loses ranking unless the stage is a diagnostic one or the request asks
for the item by id, and a source category the policy lists nowhere is not a source at all.
So does `stages.<stage>.not_relevant`: an item of a kind (or source type) listed there loses
ranking at that stage unless the request asks for it by id; a kind `stages.<stage>.require` lists
is pinned at that stage, and the seal blocks when none is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import versions
from .vocabulary import (
    SOURCE_CATEGORY_TYPES,
    TRUST_RANK,
    ExclusionReason,
    RankingFactor,
    Role,
    SourceCategory,
)
from .working import Assembly, Candidate, Exclusion

# Evidence priority: direct, fixed-revision evidence first; background and traces last.
_KIND_PRIORITY = {
    "evidence": 1.0,
    "official_document": 0.9,
    "tool_result": 0.85,
    "summary": 0.7,
    "research_plan": 0.7,
    "article_draft": 0.7,
    "memory": 0.3,
    "background": 0.2,
    "trace": 0.1,
}
_DEFAULT_RELEVANCE = 0.5


def stage_kind_matches(cand: Candidate, kind: str) -> bool:
    """Does a `stages.<stage>` entry name this item (by kind or source type)?"""
    return cand.item.kind == kind or cand.item.source_type == kind


def _stage_rules(asm: Assembly):
    return asm.policy.stages.get(asm.request.stage)


def is_pinned(asm: Assembly, cand: Candidate) -> bool:
    stage = _stage_rules(asm)
    required_here = stage is not None and any(stage_kind_matches(cand, k) for k in stage.require)
    resident = asm.policy.resident
    return (cand.item.required or cand.item.kind in resident.include or cand.item.kind in resident.when_present
            or cand.role == Role.CONTROL or required_here)


def stage_rule(asm: Assembly, cand: Candidate) -> str | None:
    """Why `stages.<stage>.not_relevant` keeps this item out of this step, or None: the agent may
    still ask for it by id (`diagnostic_item_ids`), as at recovery or state confirmation (seed §3)."""
    stage = _stage_rules(asm)
    if stage is None or cand.item_id in asm.request.diagnostic_item_ids:
        return None
    kind = next((k for k in stage.not_relevant if stage_kind_matches(cand, k)), None)
    if kind is None:
        return None
    return f"not relevant at stage {asm.request.stage} (stages.{asm.request.stage}.not_relevant: {kind}; ask for it in diagnostic_item_ids)"


def relevance(cand: Candidate) -> float:
    return cand.item.relevance if cand.item.relevance is not None else _DEFAULT_RELEVANCE


def stage_relevance(asm: Assembly, cand: Candidate) -> float:
    stages = cand.item.stages
    return 1.0 if stages is None or asm.request.stage in stages else 0.0


def evidence_priority(cand: Candidate) -> float:
    base = _KIND_PRIORITY.get(cand.item.kind, 0.5)
    trust = TRUST_RANK[cand.trust] / 7 if cand.trust is not None else 0.0
    return round(base + trust / 10, 6)


def source_category(cand: Candidate) -> SourceCategory | None:
    """The retrieval category of a candidate; a tool result is the agent's own call's output, never one."""
    if cand.item.call_id is not None:
        return None
    for category, source_types in SOURCE_CATEGORY_TYPES.items():
        if cand.item.source_type in source_types:
            return category
    return None


def retrieval_rule(asm: Assembly, cand: Candidate) -> str | None:
    """Why the policy's `retrieval` clause keeps this item out of this step, or None.

    Diagnostic sources (traces) enter only at a stage the policy lists in `diagnostic_stages` or
    when the request names the item in `diagnostic_item_ids`; a category the policy lists under no
    retrieval source is not a source of this policy at all.
    """
    category = source_category(cand)
    if category is None:
        return None
    rules = asm.policy.retrieval
    if category in rules.diagnostic_sources:
        if asm.request.stage in rules.diagnostic_stages or cand.item_id in asm.request.diagnostic_item_ids:
            return None
        return (
            f"retrieval.diagnostic_sources: {category.value} is read for diagnosis only; stage {asm.request.stage!r} "
            f"is not among diagnostic_stages {rules.diagnostic_stages} and the request did not ask for it in diagnostic_item_ids"
        )
    if category not in rules.default_sources and category not in rules.governed_candidate_sources:
        return f"retrieval: {category.value} is not among the policy's default, diagnostic or governed sources"
    return None


def _sort_key(asm: Assembly, cand: Candidate) -> tuple:
    """The rank key with a cost of 0 where `retrieval_cost` goes (`_with_cost` puts the count there)."""
    key: list[object] = [0 if cand.pinned else 1]
    for factor in asm.policy.admission.ranking:
        if factor == RankingFactor.CURRENT_DECISION_RELEVANCE:
            key.append(-relevance(cand))
        elif factor == RankingFactor.STAGE_RELEVANCE:
            key.append(-stage_relevance(asm, cand))
        elif factor == RankingFactor.EVIDENCE_PRIORITY:
            key.append(-evidence_priority(cand))
        elif factor == RankingFactor.RETRIEVAL_COST:
            key.append(0)
    key.append(cand.item_id)
    return tuple(key)


@dataclass(eq=False)
class TieGroup:
    """Candidates the ranking factors before `retrieval_cost` tie, none of them counted: ordered
    among themselves by their counts only if the budget needs any of them (`budget._Budget.walk`).
    Until then they hold consecutive provisional ranks; `resolve` gives each the rank the full key
    gives it, so a decision never depends on which order they were in before."""

    members: list[Candidate]
    keys: dict[int, tuple]  # id(member) -> its sort key with a cost of 0, which `cut` splits
    cut: int  # where the cost goes in the key
    resolved: bool = False

    def resolve(self) -> None:
        if self.resolved:
            return
        self.resolved = True
        kept = [c for c in self.members if c.rank is not None]  # those the ranking did not drop
        positions = sorted(c.rank for c in kept)  # type: ignore[type-var]
        for cand, position in zip(sorted(kept, key=self._key), positions, strict=True):
            cand.rank = position

    def _key(self, cand: Candidate) -> tuple:
        return _with_cost(self.keys[id(cand)], self.cut, cand.tokens)


def _with_cost(key: tuple, cut: int, tokens: int) -> tuple:
    """`key` with the item's tokens in the `retrieval_cost` place, `cut`."""
    return (*key[:cut], tokens, *key[cut + 1 :])


def _ordered(asm: Assembly, eligible: list[Candidate]) -> list[Candidate]:
    """`eligible` in rank order. `retrieval_cost` (the item's tokens) orders only items the factors
    before it tie, so only those are counted, and not even those when none of them is counted yet
    (items the budget may evict on a bound, `acquisition.measure`): they form a `TieGroup`, ordered
    by their counts if the budget ever needs one of them. Twins (the same content) are always
    ordered here, since which one is kept depends on it."""
    factors = asm.policy.admission.ranking
    if RankingFactor.RETRIEVAL_COST not in factors:
        return sorted(eligible, key=lambda c: _sort_key(asm, c))
    cut = 1 + factors.index(RankingFactor.RETRIEVAL_COST)  # the key's entries before the cost
    keys = {id(c): _sort_key(asm, c) for c in eligible}
    ties: dict[tuple, list[Candidate]] = {}
    for c in eligible:
        ties.setdefault(keys[id(c)][:cut], []).append(c)
    counted: set[int] = set()  # the candidates whose cost is their count
    for members in ties.values():
        if len(members) < 2:
            continue
        if any(c.counted for c in members) or len({c.item.content_hash for c in members}) < len(members):
            counted.update(id(c) for c in members)
        else:
            group = TieGroup(members, {id(c): keys[id(c)] for c in members}, cut)
            for c in members:
                c.tie_group = group

    return sorted(eligible, key=lambda c: _with_cost(keys[id(c)], cut, c.tokens) if id(c) in counted else keys[id(c)])


def rank(asm: Assembly) -> None:
    eligible = asm.alive()
    for cand in eligible:
        cand.pinned = is_pinned(asm, cand)
    ordered = _ordered(asm, eligible)
    floor = asm.policy.admission.min_relevance
    seen_hashes: dict[str, str] = {}
    position = 0
    alive = {c.item_id for c in eligible}
    covering = versions.judge(asm).duplicate
    for cand in ordered:
        lost = retrieval_rule(asm, cand) or stage_rule(asm, cand)
        if lost:
            cand.exclude(Exclusion(ExclusionReason.RANKING_LOST, lost, "ranking"))
            continue
        if not cand.pinned:
            if cand.item_id in covering and asm.versions.duplicate_of[cand.item_id] in alive:
                # A later reading that holds all of this one, the same where they overlap (ctxeng.engine.versions).
                cand.exclude(Exclusion(ExclusionReason.DUPLICATE, covering[cand.item_id], "ranking"))
                continue
            if stage_relevance(asm, cand) == 0.0:
                cand.exclude(Exclusion(ExclusionReason.RANKING_LOST, f"serves stages {cand.item.stages}, not {asm.request.stage!r}", "ranking"))
                continue
            if relevance(cand) < floor:
                cand.exclude(Exclusion(ExclusionReason.RANKING_LOST, f"relevance {relevance(cand)} below the policy floor {floor}", "ranking"))
                continue
            twin = seen_hashes.get(cand.item.content_hash)
            # A tool result or a conversation turn is an event, not a copy: "yes" said twice is two turns.
            if twin is not None and cand.item.call_id is None and cand.item.turn is None:
                cand.exclude(Exclusion(ExclusionReason.RANKING_LOST, f"duplicate content of higher-ranked item {twin!r}", "ranking"))
                continue
        seen_hashes.setdefault(cand.item.content_hash, cand.item_id)
        position += 1
        cand.rank = position
    # The budget stage walks candidates in rank order.
    asm.candidates.sort(key=lambda c: (c.rank is None, c.rank or 0, c.order))
