"""Stage 1 — acquisition: what was asked for, and what came back (seed §2, invariant 1).

Contract: the request's `source_acquisition` records are kept verbatim in the manifest, in order,
before any admission decision. `not_retrieved` and `retrieval_failed` are acquisition outcomes,
never exclusions: a source that produced no candidate cannot appear in `excluded`. The candidate
list is fixed here (plus the deterministic checkpoint summary when the request carries structured
state), and each candidate's actual content digest and token count are measured once.
"""

from __future__ import annotations

import hashlib

from .hashing import sha256_json
from .render import FENCE, block_header
from .transforms import checkpoint_item
from .vocabulary import ROLE_ZONE, Role
from .working import Assembly, Candidate


def inventory(asm: Assembly) -> None:
    req = asm.request
    items = list(req.candidates)
    if req.checkpoint is not None and all(i.item_id != req.checkpoint.summary_id for i in items):
        items.append(checkpoint_item(req.checkpoint, scope=req.scope))
    defaults = asm.policy.trust.default_by_source
    asm.candidates = [
        Candidate(item=item, order=n, content=item.content or "", trust=item.trust or defaults.get(item.source_type))
        for n, item in enumerate(items)
    ]


def candidate_set_digest(asm_request, items_content_hashes: list[tuple[str, str]]) -> str:
    return sha256_json(
        {
            "run_id": asm_request.run_id,
            "step_id": asm_request.step_id,
            "scope": asm_request.scope,
            "stage": asm_request.stage,
            "candidates": items_content_hashes,
            "tool_calls": [c.model_dump(mode="json") for c in asm_request.tool_calls],
            "required_revisions": asm_request.required_revisions,
        }
    )


def content_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def measure(asm: Assembly) -> None:
    """Count every candidate's tokens once (cached by content digest), fence header included."""
    texts: dict[str, str] = {}
    keys = []
    for cand in asm.candidates:
        key = cand.item.content_hash if cand.content and content_digest(cand.content) == cand.item.content_hash else content_digest(cand.content)
        keys.append(key)
        texts[key] = cand.content
    counts = _count_many(asm, texts)
    headers: dict[str, str] = {}
    for cand in asm.candidates:
        if cand.role != Role.CONTROL:
            cand.zone = ROLE_ZONE[cand.role]
            h = block_header(cand, asm.nonce)
            headers[content_digest(h)] = h
    header_counts = _count_many(asm, headers)
    for cand, key in zip(asm.candidates, keys, strict=True):
        cand.header_tokens = 0 if cand.role == Role.CONTROL else header_counts[content_digest(block_header(cand, asm.nonce))] + len(FENCE)
        cand.original_tokens = counts[key] + cand.header_tokens
        cand.tokens = cand.original_tokens


def _count_many(asm: Assembly, texts: dict[str, str]) -> dict[str, int]:
    counter = getattr(asm.tokenizer, "count_many", None)
    if counter is not None:
        return counter(texts)
    return {k: asm.tokenizer.count(v) for k, v in texts.items()}
