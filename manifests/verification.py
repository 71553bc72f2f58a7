"""Compare a recorded manifest with the service's re-assembly of the same request: the first difference.

A recorded step (manifests.services.recorded_steps_store) says what the agent's own engine decided.
A worker assembles the same request under the same policy revision (the service's copy, by digest)
and `first_difference` reads both manifests, in this order: the assembly's status and blocked
reason, then each item's decision and reason (in the re-assembly's order: included, then
excluded, then any item only the recording has), then `assembly_input_hash` and
`serialized_model_input_hash`. None when every one is the same: the step is `verified`.

Each side is the manifest's JSON form; nothing else of the recording is trusted (the item's
decision is read from where the manifest puts it, `included` or `excluded`).
"""

from __future__ import annotations

from typing import Any

HASHES = ("assembly_input_hash", "serialized_model_input_hash")


def decisions(manifest: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """item_id -> (decision, reason) in document order: included (admission reason), then excluded."""
    out: dict[str, tuple[str, str]] = {}
    for record in manifest.get("included") or []:
        out.setdefault(record["item_id"], ("included", str(record.get("admission_reason") or "")))
    for record in manifest.get("excluded") or []:
        out.setdefault(record["item_id"], ("excluded", str(record.get("reason") or "")))
    return out


def _said(decision: tuple[str, str] | None) -> str:
    if decision is None:
        return "absent"
    return f"{decision[0]} ({decision[1]})" if decision[1] else decision[0]


def first_difference(recorded: dict[str, Any], again: dict[str, Any]) -> str | None:
    """The first way `recorded` differs from `again` (the service's re-assembly), in words, naming
    the field or item; None when the decisions and both hashes are the same."""
    mine, theirs = recorded.get("assembly") or {}, again.get("assembly") or {}
    for name in ("status", "blocked_reason"):
        if mine.get(name) != theirs.get(name):
            return f"assembly.{name}: recorded {mine.get(name)!r}, re-assembled {theirs.get(name)!r}"
    recorded_decisions, again_decisions = decisions(recorded), decisions(again)
    for item_id in [*again_decisions, *(i for i in recorded_decisions if i not in again_decisions)]:
        was, is_ = recorded_decisions.get(item_id), again_decisions.get(item_id)
        if was != is_:
            return f"item {item_id}: recorded {_said(was)}, re-assembled {_said(is_)}"
    for name in HASHES:
        if mine.get(name) != theirs.get(name):
            return f"assembly.{name}: recorded {mine.get(name)}, re-assembled {theirs.get(name)}"
    return None


def agreement(again: dict[str, Any]) -> str:
    """What a verified step matched, for its detail."""
    hash_ = (again.get("assembly") or {}).get("serialized_model_input_hash")
    count = len(decisions(again))
    said = f"serialized_model_input_hash {hash_}" if hash_ else "blocked, no model input"
    return f"the same decisions for {count} item{'s' if count != 1 else ''}; {said}"
