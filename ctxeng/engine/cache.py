"""Stage 9 — prompt-cache identity (seed §6, §9).

Contract: the stable prefix is the control text from the policy's `cache.stable_prefix_sources`
only (research plans, open items and evidence stay in the dynamic tail). `prefix_hash` is the
sha256 of those exact bytes; `prefix_identity` is the sha256 of exactly the fields the policy's
`cache.identity` lists (ordered source ids, their content hashes, the context policy revision and
digest, the runtime policy revision), so it changes whenever one of them changes and never when
only the dynamic tail changes.

Each `cache.invalidate_on` cause has its own digest in `invalidation_keys`:
context_policy_revision (policy id, revision, digest), runtime_policy_change (runtime policy
revision), permission_change (principal id, tenant, project, permissions), project_rule_change
(the included control- and task-zone items outside the stable prefix: the rules the agent works
under), stable_source_identity_change (the prefix's source ids and hashes). A step is a `hit` only
when the previous step's record (`request.previous_cache`, the previous manifest's `cache`) has the
same identity and the same key for every listed cause; otherwise it is a `miss` and
`invalidated_by` names why. A cache hit never skips admission: this record is an observation, not a
decision.
"""

from __future__ import annotations

from typing import Any

from .hashing import sha256_json
from .models import CacheRecord
from .render import control_items
from .vocabulary import CacheIdentityField, CacheStatus, InvalidationCause, Zone
from .working import Assembly, Candidate


def _identity_parts(asm: Assembly, prefix: list[Candidate]) -> dict[CacheIdentityField, Any]:
    return {
        CacheIdentityField.ORDERED_SOURCE_IDS: [c.item_id for c in prefix],
        CacheIdentityField.SOURCE_CONTENT_HASHES: [c.item.content_hash for c in prefix],
        CacheIdentityField.CONTEXT_POLICY_REVISION: {
            "id": asm.policy.policy.id,
            "revision": asm.policy.policy.revision,
            "digest": asm.policy_digest,
        },
        CacheIdentityField.RUNTIME_POLICY_REVISION: asm.request.runtime_policy_revision,
    }


def invalidation_keys(asm: Assembly, included: list[Candidate], prefix: list[Candidate]) -> dict[InvalidationCause, str]:
    principal = asm.request.principal
    in_prefix = {id(c) for c in prefix}
    rules = sorted(
        (c.item_id, c.item.content_hash)
        for c in included
        if c.zone in (Zone.CONTROL, Zone.TASK) and id(c) not in in_prefix
    )
    facts: dict[InvalidationCause, Any] = {
        InvalidationCause.CONTEXT_POLICY_REVISION: [asm.policy.policy.id, asm.policy.policy.revision, asm.policy_digest],
        InvalidationCause.RUNTIME_POLICY_CHANGE: asm.request.runtime_policy_revision,
        InvalidationCause.PERMISSION_CHANGE: [principal.id, principal.tenant, principal.project, sorted(principal.permissions)],
        InvalidationCause.PROJECT_RULE_CHANGE: rules,
        InvalidationCause.STABLE_SOURCE_IDENTITY_CHANGE: [(c.item_id, c.item.content_hash) for c in prefix],
    }
    return {cause: sha256_json(facts[cause]) for cause in asm.policy.cache.invalidate_on}


def _status(asm: Assembly, identity: str, keys: dict[InvalidationCause, str]) -> tuple[CacheStatus, list[str]]:
    previous = asm.request.previous_cache
    if previous is None:
        if asm.request.previous_prefix_identity is None:
            return CacheStatus.MISS, ["no_previous_step"]
        if asm.request.previous_prefix_identity != identity:
            return CacheStatus.MISS, ["prefix_identity_changed"]
        if keys:  # the causes cannot be compared without the previous step's keys
            return CacheStatus.MISS, ["previous_invalidation_keys_unknown"]
        return CacheStatus.HIT, []
    causes = [cause.value for cause, key in keys.items() if previous.invalidation_keys.get(cause) != key]
    if previous.prefix_identity != identity:
        causes.insert(0, "prefix_identity_changed")
    return (CacheStatus.MISS, causes) if causes else (CacheStatus.HIT, [])


def cache_record(asm: Assembly, included: list[Candidate]) -> CacheRecord:
    sources = set(asm.policy.cache.stable_prefix_sources)
    prefix = [c for c in control_items(asm, included) if c.item.source_type in sources]
    fields = asm.policy.cache.identity
    parts = _identity_parts(asm, prefix)
    identity = sha256_json({f.value: parts[f] for f in fields})
    keys = invalidation_keys(asm, included, prefix)
    if not prefix:
        return CacheRecord(
            prefix_hash=None,
            prefix_identity=identity,
            prefix_source_ids=[],
            policy="bypassed",
            status=CacheStatus.BYPASSED,
            identity_fields=list(fields),
            invalidation_keys=keys,
        )
    status, why = _status(asm, identity, keys)
    return CacheRecord(
        prefix_hash=sha256_json([c.content for c in prefix]),
        prefix_identity=identity,
        prefix_source_ids=[c.item_id for c in prefix],
        policy="eligible",
        status=status,
        identity_fields=list(fields),
        invalidation_keys=keys,
        invalidated_by=why,
    )
