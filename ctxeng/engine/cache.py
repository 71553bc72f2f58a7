"""Stage 9 — prompt-cache identity (seed §6, §9).

Contract: the stable prefix is the control text from the policy's `cache.stable_prefix_sources`
only (research plans, open items and evidence stay in the dynamic tail). `prefix_hash` is the
sha256 of those exact bytes; `prefix_identity` is the sha256 of the ordered source ids, their
content hashes, the context policy revision and digest, and the runtime policy revision, so it
changes whenever any of them changes and never when only the dynamic tail changes. A cache hit
never skips admission: this record is an observation, not a decision.
"""

from __future__ import annotations

from .hashing import sha256_json
from .models import CacheRecord
from .render import control_items
from .vocabulary import CacheStatus
from .working import Assembly, Candidate


def cache_record(asm: Assembly, included: list[Candidate]) -> CacheRecord:
    sources = set(asm.policy.cache.stable_prefix_sources)
    prefix = [c for c in control_items(asm, included) if c.item.source_type in sources]
    identity = sha256_json(
        {
            "ordered_source_ids": [c.item_id for c in prefix],
            "source_content_hashes": [c.item.content_hash for c in prefix],
            "context_policy_revision": {"id": asm.policy.policy.id, "revision": asm.policy.policy.revision, "digest": asm.policy_digest},
            "runtime_policy_revision": asm.request.runtime_policy_revision,
        }
    )
    if not prefix:
        return CacheRecord(prefix_hash=None, prefix_identity=identity, prefix_source_ids=[], policy="bypassed", status=CacheStatus.BYPASSED)
    prefix_hash = sha256_json([c.content for c in prefix])
    previous = asm.request.previous_prefix_identity
    status = CacheStatus.HIT if previous == identity else CacheStatus.MISS
    return CacheRecord(
        prefix_hash=prefix_hash,
        prefix_identity=identity,
        prefix_source_ids=[c.item_id for c in prefix],
        policy="eligible",
        status=status,
    )
