"""Stage 1 — acquisition: what was asked for, and what came back (seed §2, invariant 1).

Contract: the request's `source_acquisition` records are kept verbatim in the manifest, in order,
before any admission decision. `not_retrieved` and `retrieval_failed` are acquisition outcomes,
never exclusions: a source that produced no candidate cannot appear in `excluded`. The candidate
list is fixed here (plus the deterministic checkpoint summary when the request carries structured
state), and each candidate's actual content digest and token count are measured once.
"""

from __future__ import annotations

from .hashing import sha256_json, sha256_text
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
                digest=sha256_text(content),
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


def measure(asm: Assembly) -> None:
    """Count every candidate's tokens once (cached by content digest), fence header included.

    A fence header is `<<<ctxeng:block nonce=N {identity}>>>`. The nonce changes at every step, the
    identity does not; where the tokenizer guarantees a token boundary before ` {` (see
    `TiktokenTokenizer.splits_before_space_punctuation`), the header is counted as the nonce part
    (once per assembly) plus the identity part (cached by digest across steps), which is exact.
    Otherwise each whole header is counted.
    """
    texts: dict[str, str] = {}
    keys = []
    for cand in asm.candidates:
        key = cand.digest
        keys.append(key)
        texts[key] = cand.content
    counts = _count_many(asm, texts)
    split = getattr(asm.tokenizer, "splits_before_space_punctuation", False)
    prefix = f"{FENCE}block nonce={asm.nonce}"
    header_keys: list[tuple[str, bool] | None] = []
    parts: dict[str, str] = {}
    for cand in asm.candidates:
        if cand.role == Role.CONTROL:
            header_keys.append(None)
            continue
        cand.zone = ROLE_ZONE[cand.role]
        h = block_header(cand, asm.nonce)
        nonce_free = split and _boundary_after(h, prefix)
        if nonce_free:
            h = h[len(prefix) :]
        key = sha256_text(h)
        header_keys.append((key, nonce_free))
        parts[key] = h
    prefix_key = sha256_text(prefix)
    parts[prefix_key] = prefix
    part_counts = _count_many(asm, parts)
    for cand, key, header in zip(asm.candidates, keys, header_keys, strict=True):
        if header is None:
            cand.header_tokens = 0
        else:
            n = part_counts[header[0]] + (part_counts[prefix_key] if header[1] else 0)
            cand.header_tokens = n + len(FENCE)
        cand.original_tokens = counts[key] + cand.header_tokens
        cand.tokens = cand.original_tokens


def _boundary_after(header: str, prefix: str) -> bool:
    """True when `header` is `prefix`, a space, then punctuation: a pre-tokenizer piece boundary."""
    if not header.startswith(prefix) or len(header) < len(prefix) + 2 or header[len(prefix)] != " ":
        return False
    nxt = header[len(prefix) + 1]
    return not (nxt.isalnum() or nxt.isspace())


def _count_many(asm: Assembly, texts: dict[str, str]) -> dict[str, int]:
    counter = getattr(asm.tokenizer, "count_many", None)
    if counter is not None:
        return counter(texts)
    return {k: asm.tokenizer.count(v) for k, v in texts.items()}
