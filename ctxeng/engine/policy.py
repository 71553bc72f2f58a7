"""Parsing requests and policies at the boundary, and the policy digest.

`policy_digest` is sha256 over the canonical JSON of the policy body with `policy.digest` removed,
after defaults are filled in (clauses added since policies were first published are left out
while empty, so older policies keep their digests), so the same policy written in YAML or JSON,
with keys in any order, has one digest. The service stores it on each PolicyRevision and the manifest records it.

`policy_warnings` lists what a valid policy leaves unchecked (today: authority source types
without a `trust.producers` list); the CLI's validate-policy, the REST validator and the editor
show them, and nothing refuses them.
"""

from __future__ import annotations

import threading
from typing import Any

from .errors import InvalidInput, load_json_text, load_yaml_text, validate
from .hashing import sha256_json
from .limits import MAX_CANDIDATES, MAX_YAML_NODES
from .models import AssemblyRequest, ContextPolicy


def parse_request(data: dict[str, Any] | str | bytes) -> AssemblyRequest:
    if isinstance(data, (str, bytes)):
        data = load_json_text(data, what="request")
    if isinstance(data, dict) and isinstance(data.get("candidates"), list) and len(data["candidates"]) > MAX_CANDIDATES:
        raise InvalidInput(
            [f"candidates: {len(data['candidates'])} candidates, more than the limit {MAX_CANDIDATES}"],
            what="request",
        )
    return validate(AssemblyRequest, data, what="request")


def parse_policy(data: dict[str, Any] | str | bytes) -> ContextPolicy:
    """A validated policy; a declared `policy.digest` must be the body's own digest."""
    if isinstance(data, (str, bytes)):
        data = load_yaml_text(data, what="policy")
    elif _nodes_beyond(data, MAX_YAML_NODES):  # a JSON body: the same bound as its YAML form
        raise InvalidInput([f"body: more than {MAX_YAML_NODES} nodes (keys, values, lists, objects)"], what="policy")
    policy = validate(ContextPolicy, data, what="policy")
    if policy.policy.digest is not None and policy.policy.digest != policy_digest(policy):
        raise InvalidInput([f"policy.digest: {policy.policy.digest} does not match the body ({policy_digest(policy)})"], what="policy")
    return policy


def _nodes_beyond(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value has more than `limit` nodes (a key and its value are two, as in
    YAML), counted without recursion and stopping at the limit: validating 200,000 unknown keys
    took pydantic ~10 s and answered 200,000 errors."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1 + (len(node) if isinstance(node, dict) else 0)
        if count > limit:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


# Clauses added after policies were first published, left out of the body while empty, so every
# policy written before they existed keeps its body and its digest: (path, clause).
_OMITTED_WHEN_EMPTY = (
    (("admission",), "allow_incomplete"), (("trust",), "producers"), ((), "stages"), ((), "upgrades"),
)
# Likewise clauses whose default is what a policy written before them gets: (path, clause, default).
_OMITTED_WHEN_DEFAULT = ((("security",), "secrets_in_call_arguments", "redact"),)


def policy_body(policy: ContextPolicy) -> dict[str, Any]:
    body = policy.model_dump(mode="json")
    body["policy"].pop("digest", None)
    for path, clause in _OMITTED_WHEN_EMPTY:
        section = body
        for key in path:
            section = section[key]
        if not section.get(clause):
            section.pop(clause, None)
    for path, clause, default in _OMITTED_WHEN_DEFAULT:
        section = body
        for key in path:
            section = section[key]
        if section.get(clause) == default:
            section.pop(clause)
    return body


# The digests of the policies assembled last, by object: a policy is frozen, and an agent's every
# step assembles under the same object. Each entry holds its policy, so its id is never reused.
_DIGESTS: dict[int, tuple[ContextPolicy, str]] = {}
_DIGESTS_MAX = 64
_DIGESTS_LOCK = threading.Lock()  # assemblies may run in threads (Session.astep)


def policy_digest(policy: ContextPolicy) -> str:
    known = _DIGESTS.get(id(policy))
    if known is not None and known[0] is policy:
        return known[1]
    digest = sha256_json(policy_body(policy))
    with _DIGESTS_LOCK:
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.pop(next(iter(_DIGESTS)))
        _DIGESTS[id(policy)] = (policy, digest)
    return digest


def policy_warnings(policy: ContextPolicy) -> list[str]:
    """`path: message` lines for what a valid policy leaves unchecked."""
    return [
        f"trust.producers.{source_type}: no producer list for authority source type {source_type!r} "
        f"({policy.trust.default_by_source[source_type].value}); its items are admitted from any producer "
        "and recorded producer_check: not_configured"
        for source_type in policy.trust.unbound_authority_types()
    ]
