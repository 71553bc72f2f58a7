"""Stage 1 — acquisition: what was asked for, and what came back (seed §2, invariant 1).

Contract: the request's `source_acquisition` records are kept verbatim in the manifest, in order,
before any admission decision. `not_retrieved` and `retrieval_failed` are acquisition outcomes,
never exclusions: a source that produced no candidate cannot appear in `excluded`. The candidate
list is fixed here (plus the deterministic checkpoint summary when the request carries structured
state), and each candidate's actual content digest is measured once, and its token count once,
except for items the budget may evict on a proven lower bound (`may_be_evicted_on_a_bound`,
`bounds`): those are counted when, and only if, a decision needs their size.
"""

from __future__ import annotations

import weakref

from .bounds import bounds_tokens, prefetch_runs
from .budget import partition_of_kind
from .hashing import sha256_json, sha256_text_kept
from .render import block_floor, block_tokens, count_key, count_offset, count_text, header_text, is_plain
from .structure import expected_completeness_labels, expected_result_headers
from .transforms import checkpoint_item
from .vocabulary import ROLE_ZONE, Eviction, Role
from .working import Assembly, Candidate


def inventory(asm: Assembly) -> None:
    req = asm.request
    items = list(req.candidates)
    if req.checkpoint is not None and all(i.item_id != req.checkpoint.summary_id for i in items):
        items.append(checkpoint_item(req.checkpoint, scope=req.scope))
    defaults = asm.policy.trust.default_by_source
    asm.candidates = []
    for n, item in enumerate(items):
        stored = _load_artifact(asm, item)
        content = item.content if item.content is not None else (stored.content if stored is not None else "")
        asm.candidates.append(
            Candidate(
                item=item,
                order=n,
                content=content,
                trust=item.trust or defaults.get(item.source_type),
                digest=sha256_text_kept(content),
                stored_artifact=stored,
            )
        )
    # Provenance is reconciled, not copied: the gates check each item against the acquisition
    # record it names (retrieved? same result digest as the items that name it?).
    asm.acquisitions = {rec.source_request_id: rec for rec in req.source_acquisition}
    for cand in asm.candidates:  # the digests of the content actually received, not the declared hashes
        if cand.item.source_request_id is not None:
            asm.produced_by.setdefault(cand.item.source_request_id, []).append(cand.digest)


def _load_artifact(asm: Assembly, item):
    """A re-injected item's stored artifact, from the store the caller gave (service or CLI); never the request."""
    if item.artifact_ref is None or asm.artifact_store is None:
        return None
    return asm.artifact_store(item.artifact_ref.artifact_id, item.artifact_ref.revision)


def candidate_set_digest(asm_request, items_content_hashes: list[tuple[str, str]]) -> str:
    """A digest of the candidate *set*: the order candidates arrive in and the order tool calls
    completed in (`completed_seq`) change nothing, so they may not change the fence nonce either."""
    return sha256_json(
        {
            "run_id": asm_request.run_id,
            "step_id": asm_request.step_id,
            "scope": asm_request.scope,
            "stage": asm_request.stage,
            "candidates": sorted(items_content_hashes),
            "tool_calls": [c.model_dump(mode="json", exclude={"completed_seq"}) for c in asm_request.tool_calls],
            "required_revisions": {k: v if isinstance(v, (int, str)) else v.model_dump(mode="json") for k, v in asm_request.required_revisions.items()},
            # Events and diagnostic asks change decisions, so they are part of the set (absent when empty,
            # so requests without them keep the digests they always had).
            **({"lifecycle_events": [e.model_dump(mode="json") for e in asm_request.lifecycle_events]} if asm_request.lifecycle_events else {}),
            **({"diagnostic_item_ids": sorted(asm_request.diagnostic_item_ids)} if asm_request.diagnostic_item_ids else {}),
        }
    )


# Characters of uncounted text handed to the tokenizer at once: large enough for its all-core pool
# (tokens.PARALLEL_MIN_CHARS), small enough that the block texts built for it stay a fraction of
# the request.
COUNT_BATCH_CHARS = 4_000_000


def measure(asm: Assembly) -> None:
    """Count every candidate's tokens once: exactly what the payload would carry for it.

    A control item carries its text; any other item its whole fenced block. A block is counted as
    its nonce-free middle (identity header and content, cached by digest across steps, asked of
    the shared cache in one batch) plus the prefix and footer holding the nonce (once per
    assembly): `render.block_tokens` says why the parts add up, and a property test recounts the
    payload to prove it. Without that tokenizer guarantee each whole block is counted.
    """
    expected_result_headers(asm)
    expected_completeness_labels(asm)
    cached = getattr(asm.tokenizer, "cached", None)
    counts: dict[str, int] = {}
    pending: dict[str, tuple[Candidate, str | None]] = {}  # key -> the candidate and header to count
    keys: list[str | None] = []
    measured: list[Candidate] = []
    bounded = bounds_tokens(asm.tokenizer)
    count_later = _CountLater(asm)
    planned: list[tuple[Candidate, str | None, str | None, bool]] = []  # candidate, header, count key, left uncounted
    sharing = getattr(asm.tokenizer, "prefetch", None) is not None and getattr(asm.tokenizer, "shared", None) is not None
    for cand in asm.candidates:
        header = None
        if cand.role != Role.CONTROL:
            cand.zone = ROLE_ZONE[cand.role]
        if not is_plain(cand):
            header = header_text(cand)
            # Only sizes reductions (source limits, truncation); never what is recorded.
            cand.header_tokens = len(header) // 3 + 16
        later = header is not None and bounded and may_be_evicted_on_a_bound(asm, cand)
        planned.append((cand, header, None if later and not sharing else count_key(asm, cand, header), later))
    if sharing:
        _prefetch(asm, planned)
    for cand, header, key, later in planned:
        if later:
            cand.floor = block_floor(asm, cand, header)
            cand.count_with = count_later
            continue
        measured.append(cand)
        keys.append(key)
        if key is None or key in counts or key in pending:
            continue
        hit = cached(key) if cached is not None else None
        if hit is not None:
            counts[key] = hit
        else:
            pending[key] = (cand, header)
    # What this process has not counted is built into block texts one batch at a time (bounded in
    # characters), so a large request never holds a second copy of all its content at once.
    batch: dict[str, str] = {}
    size = 0
    for key, (cand, header) in pending.items():
        text = count_text(asm, cand, header)
        batch[key] = text
        size += len(text)
        if size >= COUNT_BATCH_CHARS:
            counts.update(_count_many(asm, batch))
            batch, size = {}, 0
    if batch:
        counts.update(_count_many(asm, batch))
    for cand, key in zip(measured, keys, strict=True):
        cand.original_tokens = block_tokens(asm, cand) if key is None else counts[key] + count_offset(asm, cand)
        cand.tokens = cand.original_tokens


def _prefetch(asm: Assembly, planned: list[tuple[Candidate, str | None, str | None, bool]]) -> None:
    """With a shared cache (another worker process may have assembled the agent's previous step),
    ask it in one batch for every count this step may need, and for the lower bounds of the items
    left uncounted: a worker then counts only what no process has counted before. Only speed: a
    count or a bound is the same whichever process made it."""
    asm.tokenizer.prefetch(key for _cand, _header, key, _later in planned if key is not None)  # type: ignore[attr-defined]
    prefetch_runs(asm.tokenizer, [cand.content_digest for cand, _header, _key, later in planned if later])


class _CountLater:
    """Counts an item left uncounted, when a stage first reads its tokens. It holds its assembly
    weakly: candidates referring back to their assembly would keep a large request alive until
    the garbage collector's next cycle."""

    __slots__ = ("asm",)

    def __init__(self, asm: Assembly) -> None:
        self.asm = weakref.ref(asm)

    def __call__(self, cand: Candidate) -> int:
        asm = self.asm()
        assert asm is not None, "an item is counted only while its assembly runs"
        return block_tokens(asm, cand)


def may_be_evicted_on_a_bound(asm: Assembly, cand: Candidate) -> bool:
    """Is `cand` left uncounted until the budget needs its size? Only evidence and background the
    budget drops whole (partitions evicting `reduce_candidates` or `first`), never a required item,
    a tool result (its pair is one unit, counted with its call) or a control item."""
    if cand.item.required or cand.item.call_id is not None or cand.built_by_engine:
        return False
    part = asm.policy.budget.partitions[partition_of_kind(asm, cand.item.kind)]
    return part.eviction in (Eviction.REDUCE_CANDIDATES, Eviction.FIRST)


def _count_many(asm: Assembly, texts: dict[str, str]) -> dict[str, int]:
    counter = getattr(asm.tokenizer, "count_many", None)
    if counter is not None:
        return counter(texts)
    return {k: asm.tokenizer.count(v) for k, v in texts.items()}
