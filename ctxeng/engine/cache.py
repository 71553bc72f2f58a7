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
decision. A blocked assembly has no payload and so no prefix: its record is `bypassed`, with
`prefix_hash`, `prefix_identity` and `provider_marker` null and no invalidation keys; a previous
record with a null identity (a blocked step's) makes the next step a `miss`
(`previous_step_blocked`).

Provider caches, used on purpose (`provider_cache_options` asks the adapter, `provider_marker`
reads the payload back): Anthropic caches only up to a `cache_control` breakpoint, so the stable
prefix's system block carries one when the model's documented minimum cacheable length
(`ANTHROPIC_MIN_CACHEABLE_TOKENS`, counted by the manifest's estimator on the prefix text alone: the
tools before it only add) is reached; a model not in the table, or a shorter prefix, gets none and
the payload is unchanged. OpenAI caches every prompt prefix by itself; with the policy's
`cache.prompt_cache_key` the payload carries `prompt_cache_key`, derived from the prefix identity,
so steps sharing the prefix are routed to the same cache. `CacheRecord.provider_marker` records
where the payload carries the marker, the prefix identity it covers and its tokens.

The cache-eligible figure (issue 37; the one "cache" figure of the dashboard): what a provider's
automatic prefix cache could serve of this step, measured on the bytes sent. The serialized payload
is read as the provider reads it, unit by unit (`payload_units`: unit 0 the model and the tool
definitions, then the system text, `system` or `instructions`, when the payload has one, then each
message or input item); `payload_prefix_hashes[i]` is the sha256 of units 0..i, each unit's
canonical JSON followed by a newline, so equal hashes at i mean the first i+1 units are byte for
byte the same. The units this step shares with the previous step's hashes
(`previous_cache.payload_prefix_hashes`) are `cache_eligible_units`, their text tokens (every string
a unit carries, except its structural fields: role, type, ids, names, the model) are
`cache_eligible_tokens`, and `cache_eligible_share` is that over the text tokens of every unit. The
first step of a run, a step after a blocked one and a previous record without hashes have none
eligible, and `cache_eligible_basis` says which. `previous_cache_from` says whose record the status
and the figure compare with: `request` (the caller's `previous_cache`, a claim: an agent could send
its own step's hashes back and make any step 100% eligible, issue 51 N10), or `service` (a service
job: it replaces the caller's record with the run's previous step as it sealed it, `assemble`'s
`previous_cache_from`). This is an observation of the payload, like the
status: it decides nothing and it is independent of the declared stable prefix, which is a policy
(seed §5, §10: only the small control policy is pinned; the bytes after it repeat only as far as
the history does).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from .hashing import (
    canonical_json,
    canonical_json_kept,
    sha256_chain,
    sha256_json,
    sha256_object_growing,
    sha256_text,
)
from .models import CacheRecord, ProviderCacheMarker
from .render import SYSTEM_SEPARATOR, control_items
from .vocabulary import CacheIdentityField, CacheStatus, InvalidationCause, Zone
from .working import Assembly, Candidate

# Anthropic's documented minimum cacheable prompt length, by model name prefix (the longest matching
# prefix wins, as in ctxeng.sdk._models): docs.claude.com, "Prompt caching", cache limitations.
# A prompt shorter than this is processed without caching, so no breakpoint is set below it.
ANTHROPIC_MIN_CACHEABLE_TOKENS: dict[str, int] = {
    "claude-opus-4-7": 4096,
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4": 1024,  # Sonnet 4, 4.5 and 4.6
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-3-opus": 1024,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
ANTHROPIC_MAX_BREAKPOINTS = 4  # per request, the provider's limit; ctxeng sets one
OPENAI_ADAPTERS = ("openai_chat", "openai_responses")


def anthropic_minimum(model_name: str) -> int | None:
    """The model's minimum cacheable length, or None for a model the table does not know."""
    known = [p for p in ANTHROPIC_MIN_CACHEABLE_TOKENS if model_name == p or model_name.startswith(p + "-")]
    return ANTHROPIC_MIN_CACHEABLE_TOKENS[max(known, key=len)] if known else None


def prompt_cache_key(identity: str) -> str:
    return "ctxeng-" + identity.removeprefix("sha256:")[:32]


def stable_prefix(asm: Assembly, included: list[Candidate]) -> list[Candidate]:
    sources = set(asm.policy.cache.stable_prefix_sources)
    return [c for c in control_items(asm, included) if c.item.source_type in sources]


def prefix_text(prefix: list[Candidate]) -> str:
    """The stable prefix as the system text starts with it."""
    return SYSTEM_SEPARATOR.join(c.content for c in prefix)


def prefix_identity(asm: Assembly, prefix: list[Candidate]) -> str:
    parts = _identity_parts(asm, prefix)
    return sha256_json({f.value: parts[f] for f in asm.policy.cache.identity})


def provider_cache_options(asm: Assembly, included: list[Candidate], adapter: str) -> dict[str, Any]:
    """What the adapter is asked to mark: `{"cache_breakpoint": True}` (Anthropic, a prefix at
    least the model's minimum), `{"prompt_cache_key": key}` (OpenAI, when the policy opts in), or
    nothing, so the payload is what it was before provider caches were used."""
    prefix = stable_prefix(asm, included)
    if not prefix:
        return {}
    if adapter == "anthropic_messages":
        minimum = anthropic_minimum(asm.request.model.name)
        if minimum is not None and asm.tokenizer.count(prefix_text(prefix)) >= minimum:
            return {"cache_breakpoint": True}
    elif adapter in OPENAI_ADAPTERS and asm.policy.cache.prompt_cache_key:
        return {"prompt_cache_key": prompt_cache_key(prefix_identity(asm, prefix))}
    return {}


def provider_marker(asm: Assembly, prefix: list[Candidate], identity: str, payload: dict[str, Any] | None) -> ProviderCacheMarker | None:
    """The marker the payload carries, read from the payload itself: the last system block with
    `cache_control` and the text up to it, or the `prompt_cache_key`. `prefix_identity` is the
    record's identity when what is marked is exactly the stable prefix (its text, or its key)."""
    if payload is None:
        return None
    text = prefix_text(prefix)
    system = payload.get("system")
    marked = [i for i, b in enumerate(system) if isinstance(b, dict) and b.get("cache_control")] if isinstance(system, list) else []
    if marked:
        covered = SYSTEM_SEPARATOR.join(str(b.get("text", "")) for b in system[: marked[-1] + 1])  # type: ignore[index]
        return ProviderCacheMarker(
            provider="anthropic",
            kind="cache_control",
            at=f"system[{marked[-1]}]",
            prefix_identity=identity if prefix and covered == text else None,
            tokens=asm.tokenizer.count(covered),
            minimum_tokens=anthropic_minimum(asm.request.model.name),
        )
    key = payload.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return ProviderCacheMarker(
            provider="openai",
            kind="prompt_cache_key",
            at="prompt_cache_key",
            key=key,
            prefix_identity=identity if prefix and key == prompt_cache_key(identity) else None,
            tokens=asm.tokenizer.count(text),
        )
    return None


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
    if previous is not None and previous.prefix_identity is None:
        return CacheStatus.MISS, ["previous_step_blocked"]  # no payload was sent, nothing was cached
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


# A unit's fields that carry structure, not text the model reads: left out of its text tokens.
STRUCTURAL_FIELDS = frozenset({"model", "role", "type", "id", "tool_call_id", "call_id", "tool_use_id", "name"})


def payload_units(payload: dict[str, Any]) -> list[tuple[str, Any]]:
    """The payload as the provider reads it, in order, as (path, value): the model and the tools
    first, then the system text when the payload has one, then each message or input item."""
    units: list[tuple[str, Any]] = [("tools", {"model": payload.get("model"), "tools": payload.get("tools") or []})]
    if "input" in payload:  # openai_responses
        if payload.get("instructions") is not None:
            units.append(("instructions", payload["instructions"]))
        return units + [(f"input[{i}]", item) for i, item in enumerate(payload["input"])]
    if payload.get("system") is not None:  # anthropic_messages
        units.append(("system", payload["system"]))
    return units + [(f"messages[{i}]", m) for i, m in enumerate(payload.get("messages") or [])]


def unit_texts(value: Any) -> list[str]:
    """Every string a unit carries, except its structural fields."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in STRUCTURAL_FIELDS for s in unit_texts(v)]
    if isinstance(value, list):
        return [s for v in value for s in unit_texts(v)]
    return []


# Text tokens of the units counted last, per tokenizer (weakly held) by canonical JSON: an agent's
# next step sends every earlier message again, byte for byte, so each is read and counted once.
_UNIT_TOKENS: weakref.WeakKeyDictionary[Any, OrderedDict[str, int]] = weakref.WeakKeyDictionary()
_UNIT_TOKENS_MAX = 20_000


def payload_prefix_hashes(units: list[tuple[str, Any]]) -> list[str]:
    return _hashed(units)[0]


def _hashed(units: list[tuple[str, Any]]) -> tuple[list[str], list[str]]:
    """(prefix hashes, each unit's canonical JSON)."""
    texts = [canonical_json_kept(value) for _, value in units]
    hashes, _ = sha256_chain(texts, terminator="\n")
    return hashes, texts


def payload_sha256(payload: dict[str, Any], unit_json: dict[str, str]) -> str:
    """`sha256_json(payload)`, with the canonical JSON of each message (or input item) taken from
    `unit_json` (path -> text, as `_hashed` made it for the cache record) instead of serialized
    again: canonical JSON is compact and key-sorted, so a list's text is its items' texts joined by
    commas in brackets and an object's is its sorted `"key":value` pairs; the text is the same, so
    the hash is (a test compares it with `sha256_json` on every adapter's payloads)."""
    head: list[str] = []
    tail: list[str] = []
    listed: tuple[str, list[str]] | None = None  # the messages' (or input's) key and texts
    for key in sorted(payload):
        value = payload[key]
        if listed is None and key in ("messages", "input") and isinstance(value, list):
            found = [unit_json.get(f"{key}[{i}]") for i in range(len(value))]
            if None not in found:
                listed = key, found  # type: ignore[assignment]
                continue
        (head if listed is None else tail).append(canonical_json(key) + ":" + canonical_json_kept(value))
    if listed is None:
        return sha256_text("{" + ",".join(head) + "}")
    # A history that grew hashes only its new messages.
    return sha256_object_growing(head, listed[0], listed[1], tail)


def _unit_tokens(asm: Assembly, value: Any, text: str) -> int:
    try:
        known = _UNIT_TOKENS.setdefault(asm.tokenizer, OrderedDict())
    except TypeError:  # a tokenizer that cannot be weakly referenced: counted every time
        return sum(asm.tokenizer.count(t) for t in unit_texts(value))
    n = known.get(text)
    if n is None:
        n = known[text] = sum(asm.tokenizer.count(t) for t in unit_texts(value))
        if len(known) > _UNIT_TOKENS_MAX:
            known.popitem(last=False)
    return n


def _eligible(asm: Assembly, payload: dict[str, Any]) -> dict[str, Any]:
    """The cache-eligible fields of the record (see the module docstring)."""
    units = payload_units(payload)
    hashes, texts = _hashed(units)
    asm.payload_unit_json = {path: text for (path, _), text in zip(units, texts, strict=True)}
    tokens = [_unit_tokens(asm, value, text) for (_, value), text in zip(units, texts, strict=True)]
    previous = asm.request.previous_cache
    if previous is None:
        basis = "no_previous_step"
    elif previous.prefix_identity is None:
        basis = "previous_step_blocked"
    elif not previous.payload_prefix_hashes:
        basis = "previous_prefix_hashes_unknown"
    else:
        basis = "previous_step"
    same = 0
    if basis == "previous_step":
        before = previous.payload_prefix_hashes  # type: ignore[union-attr]
        while same < min(len(hashes), len(before)) and hashes[same] == before[same]:
            same += 1
    total, eligible = sum(tokens), sum(tokens[:same])
    return {
        "payload_prefix_hashes": hashes,
        "payload_text_tokens": total,
        "cache_eligible_units": same,
        "cache_eligible_tokens": eligible,
        "cache_eligible_share": round(eligible / total, 4) if total else None,
        "cache_eligible_basis": basis,
        "cache_eligible_ends_at": units[same][0] if basis == "previous_step" and same < len(units) else None,
        "previous_cache_from": asm.previous_cache_from,
    }


def cache_record(asm: Assembly, included: list[Candidate], payload: dict[str, Any] | None = None) -> CacheRecord:
    """`payload`: the serialized input (None when blocked), read for its provider cache marker.

    A blocked assembly produces no payload, so it has no prefix: its record is `bypassed` with
    `prefix_hash`, `prefix_identity` and the marker null and no invalidation keys. The prefix hash
    and identity (and the keys over the prefix's sources) would be hashes of an input that never
    exists, which a blocked manifest never carries (DESIGN: "both input hashes absent")."""
    fields = asm.policy.cache.identity
    sources = list(asm.policy.cache.stable_prefix_sources)
    if asm.blocked_reason is not None or payload is None:
        return CacheRecord(
            prefix_hash=None,
            prefix_identity=None,
            prefix_source_ids=[],
            policy="bypassed",
            status=CacheStatus.BYPASSED,
            identity_fields=list(fields),
            stable_prefix_sources=sources,
            cache_eligible_basis="blocked",
            previous_cache_from=asm.previous_cache_from,
        )
    prefix = stable_prefix(asm, included)
    identity = prefix_identity(asm, prefix)
    keys = invalidation_keys(asm, included, prefix)
    marker = provider_marker(asm, prefix, identity, payload)
    eligible = _eligible(asm, payload)
    if not prefix:
        return CacheRecord(
            prefix_hash=None,
            prefix_identity=identity,
            prefix_source_ids=[],
            policy="bypassed",
            status=CacheStatus.BYPASSED,
            identity_fields=list(fields),
            invalidation_keys=keys,
            provider_marker=marker,
            stable_prefix_sources=sources,
            **eligible,
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
        provider_marker=marker,
        stable_prefix_sources=sources,
        stable_prefix_tokens=asm.tokenizer.count(prefix_text(prefix)),
        **eligible,
    )
