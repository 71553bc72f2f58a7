"""Builders for engine tests: small, valid requests and policies with correct content hashes.

`item(...)` returns a candidate dict whose `content_hash` is the sha256 of its content, with a
source_ref complete for its source type, so a test only spells out what it is about. `request(...)`
and `policy(...)` return plain dicts (the wire format); `run(...)` parses and assembles them with a
fixed `created_at`, so two runs of the same inputs compare byte for byte.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from ctxeng.engine import AssemblyResult, assemble, parse_policy, parse_request

SCOPE = "tenant-x/project-y/task-1"
CREATED_AT = "2026-09-06T10:00:00Z"


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# source type -> (default kind, trust, role, source_ref maker)
_SOURCES: dict[str, tuple[str, str, str]] = {
    "system_policy": ("instruction", "control_authority", "control"),
    "user_request": ("goal", "task_authority", "task_intent"),
    "runtime_state": ("current_stage", "trusted_state", "state"),
    "repository_source": ("evidence", "repository_evidence", "untrusted_data"),
    "official_document": ("official_document", "external_evidence", "untrusted_data"),
    "editable_project_file": ("background", "project_editable", "untrusted_data"),
    "model_summary": ("summary", "derived_context", "derived_context"),
    "memory_object": ("memory", "governed_memory_candidate", "untrusted_data"),
    "trace": ("trace", "trusted_state", "state"),
    "tool_result": ("tool_result", "repository_evidence", "untrusted_data"),
    "test_log": ("tool_result", "repository_evidence", "untrusted_data"),
}


def source_ref_for(source_type: str, item_id: str) -> dict[str, Any]:
    if source_type in ("repository_source", "tool_result"):
        return {"repo": "pi", "commit": "c0ffee", "path": f"src/{item_id}.ts", "lines": "1-20"}
    if source_type == "test_log":
        return {"repo": "pi", "commit": "c0ffee", "artifact_id": f"log-{item_id}"}
    if source_type == "official_document":
        return {"url": f"https://docs.example.org/{item_id}"}
    if source_type == "editable_project_file":
        return {"path": f"notes/{item_id}.md"}
    if source_type == "memory_object":
        return {"memory_id": item_id}
    if source_type == "model_summary":
        return {"summary_id": item_id}
    if source_type == "trace":
        return {"trace_id": item_id}
    return {"object_id": item_id}


def item(item_id: str, source_type: str = "repository_source", content: str | None = None, **fields: Any) -> dict[str, Any]:
    kind, trust, role = _SOURCES.get(source_type, ("background", "project_editable", "untrusted_data"))
    text = content if content is not None else f"content of {item_id}"
    out: dict[str, Any] = {
        "item_id": item_id,
        "kind": kind,
        "source_type": source_type,
        "source_ref": source_ref_for(source_type, item_id),
        "content": text,
        "content_hash": sha(text),
        "scope": SCOPE,
        "trust": trust,
        "intended_role": role,
    }
    out.update(fields)
    if "content_hash" not in fields and out.get("content") is not None:
        out["content_hash"] = sha(out["content"])
    return out


def tool_call(call_id: str, result_item_id: str | None, *, tool_name: str = "read_source", arguments: dict | None = None, status: str = "success", completed_seq: int | None = None) -> dict[str, Any]:
    return {
        "call_id": call_id,
        "tool_name": tool_name,
        "arguments": arguments if arguments is not None else {"path": f"src/{call_id}.ts"},
        "status": status,
        "result_item_id": result_item_id,
        "completed_seq": completed_seq,
    }


def tool_result(item_id: str, call_id: str, content: str | None = None, *, source_type: str = "tool_result", **fields: Any) -> dict[str, Any]:
    return item(item_id, source_type, content, call_id=call_id, **fields)


def base_items() -> list[dict[str, Any]]:
    """The resident parts of `policy()`: control, goal, constraints, stage, open items."""
    return [
        item("system", "system_policy", "You are a careful research agent. Cite every claim."),
        item("goal", "user_request", "Find how tool calls are paired.", kind="goal"),
        item("constraints", "user_request", "Cite fixed revisions only.", kind="hard_constraints"),
        item("stage", "runtime_state", "stage: drafting", kind="current_stage"),
        item("open", "runtime_state", "OI-1 check pairing", kind="open_items_summary", open_item_ids=["OI-1"]),
    ]


def request(candidates: list[dict[str, Any]] | None = None, *, extra: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    """A request whose candidates are `candidates` (default: `base_items()` plus `extra`)."""
    cands = candidates if candidates is not None else base_items() + (extra or [])
    out: dict[str, Any] = {
        "schema_version": "assembly-request/v1",
        "run_id": "run-1",
        "step_id": "step-1",
        "policy": {"id": "test-policy", "revision": 1},
        "principal": {"id": "agent/v1", "tenant": "tenant-x", "project": "project-y"},
        "scope": SCOPE,
        "stage": "drafting",
        "model": {"provider": "openai", "name": "gpt-4", "context_limit": 16000},  # cl100k, exact: the counts these tests reason about
        "candidates": cands,
    }
    out.update(fields)
    return out


def policy(**overrides: Any) -> dict[str, Any]:
    """A policy shaped like the worked example's, with room to spare; `overrides` replace top-level keys."""
    out: dict[str, Any] = {
        "policy_schema_version": "context-policy/v1",
        "policy": {"id": "test-policy", "revision": 1},
        "admission": {
            "hard_filters": [
                "permission",
                "tenant_and_project_scope",
                "required_revision",
                "freshness",
                "trust_role_compatibility",
                "structural_integrity",
                "security_policy_compliance",
            ],
            "ranking": ["current_decision_relevance", "stage_relevance", "evidence_priority", "retrieval_cost"],
        },
        "trust": {
            "default_by_source": {
                "system_policy": "control_authority",
                "user_request": "task_authority",
                "runtime_state": "trusted_state",
                "repository_source": "repository_evidence",
                "official_document": "external_evidence",
                "editable_project_file": "project_editable",
                "model_summary": "derived_context",
                "memory_object": "governed_memory_candidate",
            }
        },
        "role_limits": {
            "control_authority": ["control"],
            "task_authority": ["task_intent"],
            "trusted_state": ["state"],
            "repository_evidence": ["untrusted_data"],
            "external_evidence": ["untrusted_data"],
            "project_editable": ["untrusted_data"],
            "derived_context": ["derived_context"],
            "governed_memory_candidate": ["state", "untrusted_data", "derived_context"],
        },
        "resident": {"include": ["goal", "hard_constraints", "current_stage", "open_items_summary"]},
        "source_limits": {"test_log": {"default": "failures_plus_artifact_ref"}},
        "budget": {
            "model_context_limit": 16000,
            "response_reserve": 2000,
            "protocol_overhead": 500,
            "safety_margin": 500,
            "partitions": {
                "control": {"minimum": 500, "eviction": "never", "kinds": ["instruction", "goal", "hard_constraints"]},
                "state": {
                    "minimum": 500,
                    "eviction": "structured_summary",
                    "kinds": ["current_stage", "open_items_summary", "research_plan", "summary"],
                },
                "direct_evidence": {"minimum": 1000, "eviction": "reduce_candidates", "kinds": ["evidence", "official_document"]},
                "recent_tool_pairs": {"minimum": 1000, "eviction": "complete_pair_only", "kinds": ["tool_call", "tool_result"]},
                "background": {"maximum": 1500, "eviction": "first", "kinds": ["trace", "memory", "background"]},
            },
            "borrowing": "preserve_all_minimums",
        },
        "transforms": {"allowed": ["none", "excerpt", "summarize"], "preserve": ["goal", "open_items", "source_refs"]},
        "serialization": {"adapter": "openai_chat", "policy_version": "openai-chat/1"},
    }
    out.update(overrides)
    return out


def with_budget(pol: dict[str, Any], **budget: Any) -> dict[str, Any]:
    pol = copy.deepcopy(pol)
    pol["budget"].update(budget)
    return pol


def run(req: dict[str, Any], pol: dict[str, Any] | None = None, **kwargs: Any) -> AssemblyResult:
    return assemble(parse_request(req), parse_policy(pol if pol is not None else policy()), created_at=CREATED_AT, **kwargs)


def reasons(result: AssemblyResult) -> dict[str, str]:
    return result.manifest.excluded_reasons()


def excluded_record(result: AssemblyResult, item_id: str):
    return next(e for e in result.manifest.excluded if e.item_id == item_id)


def system_text(payload: dict[str, Any]) -> str:
    """Every string the provider treats as system/developer instruction."""
    if "instructions" in payload:  # openai_responses: the instructions and any system-side input message
        extra = [p.get("text", "") for m in payload["input"] if m.get("type") == "message" and m["role"] in ("system", "developer")
                 for p in m["content"]]
        return "\n".join([payload["instructions"], *extra])
    if "system" in payload:
        system = payload["system"]
        return system if isinstance(system, str) else "\n".join(b.get("text", "") for b in system)
    parts = []
    for msg in payload["messages"]:
        if msg["role"] in ("system", "developer"):
            content = msg["content"]
            parts.append(content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content))
    return "\n".join(parts)


def canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
