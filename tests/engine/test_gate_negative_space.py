"""The negative space of every admission gate (issue 43, class 1): each field a gate reads, given
as absent, empty, whitespace-only, of the wrong type, on its boundary and hostile.

One table. Each row builds the smallest request around one candidate, `subject`, changing one
field, and states the verdict the rules give, written out by hand from the seed (§2 hard gates,
§9 invariant 2) and the README's gate rules, never read back from a run:

- `Refused(path)`: the request (or policy) is bad input, refused naming the field path;
- `Excluded(gate, reason, words)`: the subject is excluded at that gate, with that reason code,
  and the detail says `words` (the words that name *why*, so a refusal for another reason at the
  same gate does not pass); the gates before it passed and the ones after were not evaluated;
- `Admitted()`: the subject enters (every gate passed).

A row that only checked "excluded" would miss a gate that refuses for the wrong reason (the
project of a two-segment scope compared only for longer paths is refused as "outside the request
scope", and the scope still looks guarded).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ctxeng.engine import InvalidInput, assemble, parse_policy, parse_request
from ctxeng.engine.models import StoredArtifact

from .builders import CREATED_AT, base_items, item, policy, request, sha

GATES = [
    "permission",
    "tenant_and_project_scope",
    "required_revision",
    "freshness",
    "trust_role_compatibility",
    "structural_integrity",
    "security_policy_compliance",
]
SUBJECT = 5  # after base_items()' five resident parts
MISSING = object()  # the field is absent from the wire document


@dataclass(frozen=True)
class Refused:
    path: str


@dataclass(frozen=True)
class Excluded:
    gate: str
    reason: str
    words: str


@dataclass(frozen=True)
class Reinjected:
    """Excluded by a re-injection clause of its own (seed §7), after the gates passed."""

    clause: str
    reason: str
    words: str


@dataclass(frozen=True)
class Admitted:
    pass


@dataclass(frozen=True)
class Row:
    id: str
    subject: dict[str, Any]  # fields of the subject item (MISSING: drop the field)
    expect: Refused | Excluded | Reinjected | Admitted
    source_type: str = "editable_project_file"
    request: dict[str, Any] | None = None  # top-level request fields
    policy: Callable[[dict], None] | None = None  # edits the policy dict in place
    base: Callable[[list[dict]], None] | None = None  # edits the resident parts in place
    stored: dict[str, Any] | None = None  # the artifact store's plan-42@5, for a re-injected subject


def subject(source_type: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The subject item: valid for its source type, then `fields` laid over it (MISSING drops one);
    a content given without a hash gets its own hash, so only the named field is off."""
    out = item("subject", source_type, "the subject's text")
    for name, value in fields.items():
        if value is MISSING:
            out.pop(name, None)
        else:
            out[name] = value
    if isinstance(fields.get("content"), str) and "content_hash" not in fields:
        out["content_hash"] = sha(fields["content"])
    return out


def build(row: Row) -> tuple[dict, dict]:
    base = base_items()
    if row.base is not None:
        row.base(base)
    req = request(base + [subject(row.source_type, row.subject)], **(row.request or {}))
    pol = copy.deepcopy(policy())
    if row.policy is not None:
        row.policy(pol)
    return req, pol


STORED = {"artifact_id": "plan-42", "revision": 5, "kind": "background", "content": "the subject's text",
          "content_hash": sha("the subject's text"), "writer": "agent/v1", "scope": "tenant-x/project-y"}
# A re-injected subject: its content comes from the store, by its artifact_ref.
REINJECTED = {"source_ref": {"artifact_id": "plan-42", "revision": 5}, "artifact_ref": {"artifact_id": "plan-42", "revision": 5},
              "revision": 5, "content": MISSING}


def store(stored: dict[str, Any] | None):
    """The artifact store of a row: the one stored artifact, by (artifact_id, revision)."""
    if stored is None:
        return None
    artifact = StoredArtifact.model_validate(stored)

    def lookup(artifact_id: str, revision):
        return artifact if artifact_id == artifact.artifact_id and revision in (None, artifact.revision) else None

    return lookup


def order(pol: dict) -> list[str]:
    return pol["admission"]["hard_filters"]


# --------------------------------------------------------------------------- policy edits


def producers(**bound: list[str]) -> Callable[[dict], None]:
    def edit(pol: dict) -> None:
        pol["trust"]["producers"] = bound

    return edit


def security_first(pol: dict) -> None:
    """The policy may reorder the gates: security first, so its own assessments are what refuses."""
    pol["admission"]["hard_filters"] = ["security_policy_compliance"] + [g for g in GATES if g != "security_policy_compliance"]


def secret_material(mode: str) -> Callable[[dict], None]:
    def edit(pol: dict) -> None:
        pol["security"] = {"secret_material": mode}

    return edit


def producer_on_system(name: str) -> Callable[[list[dict]], None]:
    def edit(base: list[dict]) -> None:
        base[0]["producer"] = name

    return edit


PLAN = {"artifact_id": "plan-42"}
REQUIRED = {"required_revisions": {"plan-42": 3}}
SCOPE_EVENT = {"event": "permission_revoked", "scope": "tenant-x/project-y", "emitted_by": "service"}
KEY = "sk-" + "Ab3" * 10  # a credential shape the README names (OpenAI key)


ROWS: list[Row] = [
    # ------------------------------------------------------------------ permission: scope's tenant
    Row("scope absent", {"scope": MISSING}, Refused(f"candidates[{SUBJECT}].scope")),
    Row("scope empty", {"scope": ""}, Refused(f"candidates[{SUBJECT}].scope")),
    Row("scope wrong type", {"scope": 7}, Refused(f"candidates[{SUBJECT}].scope")),
    Row("scope as a list", {"scope": ["tenant-x", "project-y"]}, Refused(f"candidates[{SUBJECT}].scope")),
    Row("scope null", {"scope": None}, Refused(f"candidates[{SUBJECT}].scope")),
    Row("scope whitespace", {"scope": "   "}, Excluded("permission", "permission_denied", "tenant '   '")),
    Row("scope only separators", {"scope": "//"}, Excluded("permission", "permission_denied", "tenant ''")),
    Row("tenant in other case", {"scope": "TENANT-X/project-y/task-1"}, Excluded("permission", "permission_denied", "tenant 'TENANT-X'")),
    Row("tenant with a trailing space", {"scope": "tenant-x /project-y/task-1"}, Excluded("permission", "permission_denied", "tenant 'tenant-x '")),
    Row("tenant as a prefix", {"scope": "tenant-xx/project-y/task-1"}, Excluded("permission", "permission_denied", "tenant 'tenant-xx'")),
    Row("dot-dot before the tenant", {"scope": "../tenant-x/project-y/task-1"}, Excluded("permission", "permission_denied", "tenant '..'")),
    Row("another tenant's scope", {"scope": "tenant-z/project-y/task-1"}, Excluded("permission", "permission_denied", "tenant 'tenant-z'")),
    Row("tenant alone is an ancestor", {"scope": "tenant-x"}, Admitted()),
    Row("revoked for the item", {}, Excluded("permission", "permission_denied", "lifecycle event permission_revoked"),
        request={"lifecycle_events": [{"event": "permission_revoked", "item_id": "subject", "emitted_by": "service"}]}),
    Row("revoked for an ancestor scope", {}, Excluded("permission", "permission_denied", "lifecycle event permission_revoked"),
        request={"lifecycle_events": [SCOPE_EVENT]}),
    Row("revoked for a scope that is only a string prefix", {}, Admitted(),
        request={"lifecycle_events": [{**SCOPE_EVENT, "scope": "tenant-x/project-"}]}),
    Row("revoked for another tenant's same-named project", {}, Admitted(),
        request={"lifecycle_events": [{**SCOPE_EVENT, "scope": "tenant-z/project-y"}]}),
    Row("revoked for an empty scope", {}, Refused("lifecycle_events[0].scope"), request={"lifecycle_events": [{**SCOPE_EVENT, "scope": ""}]}),
    Row("revoked for a scope of separators", {}, Refused("lifecycle_events[0].scope"), request={"lifecycle_events": [{**SCOPE_EVENT, "scope": "//"}]}),
    Row("revoked for a whitespace scope", {}, Refused("lifecycle_events[0].scope"), request={"lifecycle_events": [{**SCOPE_EVENT, "scope": " / "}]}),
    Row("revoked for a whitespace item id", {}, Refused("lifecycle_events[0].item_id"),
        request={"lifecycle_events": [{"event": "permission_revoked", "item_id": "  "}]}),
    Row("revoked for the item and a scope at once", {}, Refused("lifecycle_events[0].item_id"),
        request={"lifecycle_events": [{**SCOPE_EVENT, "item_id": "subject"}]}),
    Row("revoked for the artifact the item names", {"source_ref": {"artifact_id": "plan-42", "revision": 5}},
        Excluded("permission", "permission_denied", "lifecycle event permission_revoked"),
        request={"lifecycle_events": [{"event": "permission_revoked", "artifact_id": "plan-42"}]}),
    Row("revoked for another revision of the artifact", {"source_ref": {"artifact_id": "plan-42", "revision": 5}}, Admitted(),
        request={"lifecycle_events": [{"event": "permission_revoked", "artifact_id": "plan-42", "revision": 4}]}),
    Row("revoked for the revision, as text", {"source_ref": {"artifact_id": "plan-42", "revision": 5}},
        Excluded("permission", "permission_denied", "plan-42@5"),
        request={"lifecycle_events": [{"event": "permission_revoked", "artifact_id": "plan-42", "revision": "5"}]}),
    # ------------------------------------------------------------------ tenant_and_project_scope
    Row("another project, two segments", {"scope": "tenant-x/project-z"},
        Excluded("tenant_and_project_scope", "permission_denied", "in project 'project-z'")),
    Row("another project, three segments", {"scope": "tenant-x/project-z/task-1"},
        Excluded("tenant_and_project_scope", "permission_denied", "in project 'project-z'")),
    Row("whitespace project", {"scope": "tenant-x/ "}, Excluded("tenant_and_project_scope", "permission_denied", "in project ' '")),
    Row("project in other case", {"scope": "tenant-x/PROJECT-Y"}, Excluded("tenant_and_project_scope", "permission_denied", "in project 'PROJECT-Y'")),
    Row("project as a prefix", {"scope": "tenant-x/project-yy/task-1"}, Excluded("tenant_and_project_scope", "permission_denied", "in project 'project-yy'")),
    Row("dot-dot out of the project", {"scope": "tenant-x/project-y/../project-z"},
        Excluded("tenant_and_project_scope", "permission_denied", "outside the request scope")),
    Row("another task", {"scope": "tenant-x/project-y/task-2"}, Excluded("tenant_and_project_scope", "permission_denied", "outside the request scope")),
    Row("below the request scope", {"scope": "tenant-x/project-y/task-1/sub"},
        Excluded("tenant_and_project_scope", "permission_denied", "outside the request scope")),
    Row("task with a trailing space", {"scope": "tenant-x/project-y/task-1 "},
        Excluded("tenant_and_project_scope", "permission_denied", "outside the request scope")),
    Row("the project is an ancestor", {"scope": "tenant-x/project-y"}, Admitted()),
    Row("a trailing separator", {"scope": "tenant-x/project-y/task-1/"}, Admitted()),
    Row("empty segments", {"scope": "/tenant-x//project-y/"}, Admitted()),
    Row("request outside the principal's project", {}, Refused("scope"), request={"scope": "tenant-x/project-z/task-1"}),
    Row("principal's tenant whitespace", {"scope": "  /project-y/task-1"}, Refused("principal.tenant"),
        request={"principal": {"id": "agent/v1", "tenant": "  ", "project": "project-y"}, "scope": "  /project-y/task-1"}),
    Row("principal's project whitespace", {"scope": "tenant-x/ /task-1"}, Refused("principal.project"),
        request={"principal": {"id": "agent/v1", "tenant": "tenant-x", "project": " "}, "scope": "tenant-x/ /task-1"}),
    Row("principal's project two segments", {}, Refused("principal.project"),
        request={"principal": {"id": "agent/v1", "tenant": "tenant-x", "project": "project-y/task-1"}}),
    Row("principal's tenant absent", {}, Refused("principal.tenant"), request={"principal": {"id": "agent/v1", "project": "project-y"}}),
    # ------------------------------------------------------------------ required_revision
    Row("required revision absent", {"source_ref": PLAN}, Excluded("required_revision", "stale_revision", "at revision None"), request=REQUIRED),
    Row("required revision empty", {"source_ref": {**PLAN, "revision": ""}}, Excluded("required_revision", "stale_revision", "at revision ''"), request=REQUIRED),
    Row("required revision whitespace", {"source_ref": {**PLAN, "revision": " 3"}}, Excluded("required_revision", "stale_revision", "at revision ' 3'"), request=REQUIRED),
    Row("required revision a boolean", {"source_ref": {**PLAN, "revision": True}}, Excluded("required_revision", "stale_revision", "at revision True"), request=REQUIRED),
    Row("required revision a list", {"source_ref": {**PLAN, "revision": [3]}}, Excluded("required_revision", "stale_revision", "at revision [3]"), request=REQUIRED),
    Row("required revision one below", {"source_ref": {**PLAN, "revision": 2}}, Excluded("required_revision", "stale_revision", "requires 3"), request=REQUIRED),
    Row("required revision one above", {"source_ref": {**PLAN, "revision": 4}}, Excluded("required_revision", "stale_revision", "requires 3"), request=REQUIRED),
    Row("required revision exact", {"source_ref": {**PLAN, "revision": 3}}, Admitted(), request=REQUIRED),
    Row("required revision exact, as text", {"source_ref": {**PLAN, "revision": "3"}}, Admitted(), request=REQUIRED),
    Row("required revision on the item", {"source_ref": PLAN, "revision": 2}, Excluded("required_revision", "stale_revision", "requires 3"), request=REQUIRED),
    Row("required revision of a cited ref", {"source_refs": [{**PLAN, "revision": 1}]},
        Excluded("required_revision", "stale_revision", "source_refs[0]: artifact_id 'plan-42'"), request=REQUIRED),
    Row("required revision of a cited ref without one", {"source_refs": [PLAN]},
        Excluded("required_revision", "stale_revision", "source_refs[0]: artifact_id 'plan-42' is at revision None"), request=REQUIRED),
    Row("required revision from an authority the policy does not take", {"source_ref": {**PLAN, "revision": 3}},
        Refused("required_revisions.plan-42.source"), request={"required_revisions": {"plan-42": {"revision": 3, "source": "task_spec"}}},
        policy=lambda p: p.update(revision_authority={"required_revision_sources": ["runtime_business_state"]})),
    # ------------------------------------------------------------------ freshness
    Row("freshness absent is valid", {"freshness": MISSING}, Admitted()),
    Row("freshness empty", {"freshness": ""}, Refused(f"candidates[{SUBJECT}].freshness")),
    Row("freshness whitespace", {"freshness": " valid"}, Refused(f"candidates[{SUBJECT}].freshness")),
    Row("freshness other case", {"freshness": "VALID"}, Refused(f"candidates[{SUBJECT}].freshness")),
    Row("freshness null", {"freshness": None}, Refused(f"candidates[{SUBJECT}].freshness")),
    Row("freshness wrong type", {"freshness": 1}, Refused(f"candidates[{SUBJECT}].freshness")),
    Row("freshness expired", {"freshness": "expired"}, Excluded("freshness", "expired", "freshness is expired")),
    Row("freshness unverifiable", {"freshness": "unverifiable"}, Excluded("freshness", "unverifiable", "cannot be verified")),
    Row("freshness refresh_required", {"freshness": "refresh_required"}, Excluded("freshness", "hard_gate_rejected", "refresh_required")),
    Row("a state the policy does not recognize", {"freshness": "refresh_required"}, Excluded("freshness", "unverifiable", "not a state policy"),
        policy=lambda p: p.update(freshness={"states": ["valid", "expired", "unverifiable"]})),
    Row("source expired by event", {}, Excluded("freshness", "expired", "lifecycle event source_expired"),
        request={"lifecycle_events": [{"event": "source_expired", "item_id": "subject"}]}),
    Row("task closed by event, for the scope", {}, Excluded("freshness", "expired", "lifecycle event task_closed"),
        request={"lifecycle_events": [{"event": "task_closed", "scope": "tenant-x/project-y/task-1"}]}),
    # ------------------------------------------------------------------ trust_role_compatibility
    Row("trust absent takes the source default", {"trust": MISSING}, Admitted()),
    Row("trust empty", {"trust": ""}, Refused(f"candidates[{SUBJECT}].trust")),
    Row("trust whitespace", {"trust": " project_editable"}, Refused(f"candidates[{SUBJECT}].trust")),
    Row("trust wrong type", {"trust": 2}, Refused(f"candidates[{SUBJECT}].trust")),
    Row("role absent", {"intended_role": MISSING}, Refused(f"candidates[{SUBJECT}].intended_role")),
    Row("role empty", {"intended_role": ""}, Refused(f"candidates[{SUBJECT}].intended_role")),
    Row("role other case", {"intended_role": "UNTRUSTED_DATA"}, Refused(f"candidates[{SUBJECT}].intended_role")),
    Row("source type empty", {}, Refused(f"candidates[{SUBJECT}].source_type"), source_type=""),
    Row("source type wrong type", {}, Refused(f"candidates[{SUBJECT}].source_type"), source_type=3),
    Row("trust above the source type's default", {"trust": "repository_evidence"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "above what source type 'editable_project_file' grants")),
    Row("authority claimed by a data source", {"trust": "control_authority", "intended_role": "control"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "above what source type")),
    Row("role outside the trust's role limits", {"intended_role": "state"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may not take role 'state'")),
    Row("control role for text without control authority", {"trust": "task_authority", "intended_role": "control"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "only control_authority text may take the control role"), source_type="user_request"),
    Row("a tool result claiming the user's words", {"call_id": "c1", "intended_role": "task_intent"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "cannot take role 'task_intent'"),
        request={"tool_calls": [{"call_id": "c1", "tool_name": "read", "arguments": {}, "status": "success", "result_item_id": "subject"}]}),
    # a source type without a trust default: untrusted data only, whatever it claims
    Row("no default and no label", {"trust": MISSING, "intended_role": "untrusted_data"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "no trust label"), source_type="web_scrape"),
    Row("no default, data as data", {"trust": "external_evidence", "intended_role": "untrusted_data"}, Admitted(), source_type="web_scrape"),
    Row("no default, claims derived_context", {"trust": "derived_context", "intended_role": "derived_context"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="web_scrape"),
    Row("no default, memory in the state role", {"trust": "governed_memory_candidate", "intended_role": "state"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="web_scrape"),
    Row("no default, data label in the derived role", {"trust": "external_evidence", "intended_role": "derived_context"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="web_scrape"),
    Row("no default, authority as data", {"trust": "trusted_state", "intended_role": "untrusted_data"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="web_scrape"),
    Row("whitespace source type has no default", {"trust": "derived_context", "intended_role": "derived_context"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="   "),
    Row("a known type in other case has no default", {"trust": "derived_context", "intended_role": "derived_context"},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "may only be untrusted data"), source_type="Model_Summary"),
    # another agent's output: source_refs and a producer identity
    Row("agent output with its identity", {"trust": "external_evidence", "producer": "research-agent/v2", "source_refs": [{"url": "https://a.example"}]},
        Admitted(), source_type="agent_output"),
    Row("agent output, producer absent", {"trust": "external_evidence", "producer": MISSING, "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer empty", {"trust": "external_evidence", "producer": "", "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer whitespace", {"trust": "external_evidence", "producer": "   ", "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer tabs and newlines", {"trust": "external_evidence", "producer": "\t\n\r", "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer unicode spaces", {"trust": "external_evidence", "producer": "\u00a0\u3000\u2028", "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer invisible characters", {"trust": "external_evidence", "producer": "\u200b\u200d\ufeff", "source_refs": [{"url": "https://a.example"}]},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing producer"), source_type="agent_output"),
    Row("agent output, producer wrong type", {"trust": "external_evidence", "producer": ["research-agent"], "source_refs": [{"url": "https://a.example"}]},
        Refused(f"candidates[{SUBJECT}].producer"), source_type="agent_output"),
    Row("agent output, source_refs empty", {"trust": "external_evidence", "producer": "research-agent/v2", "source_refs": []},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing source_refs"), source_type="agent_output"),
    Row("agent output, neither", {"trust": "external_evidence", "producer": " ", "source_refs": MISSING},
        Excluded("trust_role_compatibility", "hard_gate_rejected", "missing source_refs and producer"), source_type="agent_output"),
    # trust.producers binds an authority source type to its producers
    Row("bound producer", {"producer": "ops-console"}, Admitted(), source_type="system_policy",
        policy=producers(system_policy=["ops-console"]), base=producer_on_system("ops-console")),
    Row("bound type, producer absent", {"producer": MISSING}, Excluded("trust_role_compatibility", "hard_gate_rejected", "producer '' may not emit"),
        source_type="system_policy", policy=producers(system_policy=["ops-console"]), base=producer_on_system("ops-console")),
    Row("bound type, producer whitespace", {"producer": "  "}, Excluded("trust_role_compatibility", "hard_gate_rejected", "producer '  ' may not emit"),
        source_type="system_policy", policy=producers(system_policy=["ops-console"]), base=producer_on_system("ops-console")),
    Row("bound type, producer padded", {"producer": " ops-console"}, Excluded("trust_role_compatibility", "hard_gate_rejected", "producer ' ops-console' may not emit"),
        source_type="system_policy", policy=producers(system_policy=["ops-console"]), base=producer_on_system("ops-console")),
    Row("bound type, producer in other case", {"producer": "OPS-CONSOLE"}, Excluded("trust_role_compatibility", "hard_gate_rejected", "may not emit source type 'system_policy'"),
        source_type="system_policy", policy=producers(system_policy=["ops-console"]), base=producer_on_system("ops-console")),
    Row("a policy binding a blank producer", {"producer": " "}, Refused("trust.producers.system_policy[0]"),
        source_type="system_policy", policy=producers(system_policy=[" "])),
    Row("a policy binding an invisible producer", {"producer": "\u200b"}, Refused("trust.producers.system_policy[0]"),
        source_type="system_policy", policy=producers(system_policy=["\u200b"])),
    # ------------------------------------------------------------------ structural_integrity
    Row("content absent", {"content": MISSING}, Refused(f"candidates[{SUBJECT}].content")),
    Row("content wrong type", {"content": 12}, Refused(f"candidates[{SUBJECT}].content")),
    Row("content empty", {"content": ""}, Admitted()),
    Row("content hash absent", {"content_hash": MISSING}, Refused(f"candidates[{SUBJECT}].content_hash")),
    Row("content hash empty", {"content_hash": ""}, Refused(f"candidates[{SUBJECT}].content_hash")),
    Row("content hash upper case", {"content_hash": sha("the subject's text").upper()}, Refused(f"candidates[{SUBJECT}].content_hash")),
    Row("content hash of other text", {"content_hash": sha("the subject's text ")},
        Excluded("structural_integrity", "hard_gate_rejected", "content hash mismatch")),
    Row("content hash of nothing", {"content_hash": sha("")}, Excluded("structural_integrity", "hard_gate_rejected", "content hash mismatch")),
    Row("source_ref absent", {"source_ref": MISSING}, Refused(f"candidates[{SUBJECT}].source_ref")),
    Row("source_ref wrong type", {"source_ref": "notes/subject.md"}, Refused(f"candidates[{SUBJECT}].source_ref")),
    Row("source_ref empty", {"source_ref": {}}, Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref locator empty", {"source_ref": {"path": ""}}, Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref locator null", {"source_ref": {"path": None}}, Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref locator whitespace", {"source_ref": {"path": " \t"}}, Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref locator an empty list", {"source_ref": {"path": []}}, Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref half an alternative", {"source_ref": {"artifact_id": "plan-42"}},
        Excluded("structural_integrity", "hard_gate_rejected", "needs artifact_id+revision or path")),
    Row("source_ref revision zero is a revision", {"source_ref": {"artifact_id": "plan-42", "revision": 0}}, Admitted()),
    Row("source_ref empty for a type with no required fields", {"source_ref": {}, "trust": "external_evidence"},
        Excluded("structural_integrity", "hard_gate_rejected", "source_ref is empty"), source_type="web_scrape"),
    Row("source_ref naming another content hash", {"source_ref": {"path": "notes/s.md", "content_hash": sha("other")}},
        Excluded("structural_integrity", "hard_gate_rejected", "source_ref.content_hash differs")),
    Row("completeness partial", {"completeness": "partial"}, Excluded("structural_integrity", "hard_gate_rejected", "completeness 'partial'")),
    Row("completeness unknown", {"completeness": "unknown"}, Excluded("structural_integrity", "hard_gate_rejected", "completeness 'unknown'")),
    Row("completeness empty", {"completeness": ""}, Refused(f"candidates[{SUBJECT}].completeness")),
    Row("completeness partial, diagnostic allowed", {"completeness": "partial"}, Admitted(),
        policy=lambda p: p["admission"].update(allow_incomplete=["diagnostic"])),
    Row("a source request nobody made", {"source_request_id": "sr-9"},
        Excluded("structural_integrity", "hard_gate_rejected", "names no source request")),
    Row("lineage naming an unknown input", {"source_lineage": [{"node_id": "subject", "type": "excerpt", "input_node_ids": ["ghost"]}]},
        Excluded("structural_integrity", "hard_gate_rejected", "names unknown inputs ['ghost']")),
    Row("lineage ending at another digest", {"source_lineage": [{"node_id": "subject", "type": "excerpt", "digest": sha("other")}]},
        Excluded("structural_integrity", "hard_gate_rejected", "last source_lineage node's digest differs")),
    # ------------------------------------------------------------------ security_policy_compliance
    Row("secret class", {"security_class": "secret"}, Excluded("security_policy_compliance", "security_rejected", "security_class 'secret' is secret material")),
    Row("credential class", {"security_class": "credential"}, Excluded("security_policy_compliance", "security_rejected", "security_class 'credential'")),
    Row("secret class in other case", {"security_class": "SECRET"}, Excluded("security_policy_compliance", "security_rejected", "security_class 'SECRET'")),
    Row("secret class padded", {"security_class": " secret "}, Excluded("security_policy_compliance", "security_rejected", "security_class ' secret '")),
    Row("security class empty is no secret class", {"security_class": ""}, Admitted()),
    Row("security class wrong type", {"security_class": 1}, Refused(f"candidates[{SUBJECT}].security_class")),
    Row("a credential in the content, deny", {"content": f"token {KEY}"},
        Excluded("security_policy_compliance", "security_rejected", "credential-like material"), policy=secret_material("deny")),
    Row("a credential in the content, redacted", {"content": f"token {KEY}"}, Admitted()),
    Row("text without authority as the task", {"trust": "project_editable", "intended_role": "task_intent"},
        Excluded("security_policy_compliance", "security_rejected", "'task_intent' is not isolated as data"), policy=security_first),
    Row("another project, by the security gate", {"scope": "tenant-x/project-z"},
        Excluded("security_policy_compliance", "security_rejected", "in project 'project-z'"), policy=security_first),
    # ------------------------------------------------------------------ re-injection (seed §7), clause by clause
    Row("re-injected, every clause holds", REINJECTED, Admitted(), stored=STORED),
    Row("re-injected, producer is the writer", {**REINJECTED, "producer": "agent/v1"}, Admitted(), stored=STORED),
    Row("re-injected, nothing stored", REINJECTED, Excluded("structural_integrity", "hard_gate_rejected", "plan-42@5 could not be loaded")),
    Row("re-injected, producer whitespace", {**REINJECTED, "producer": "  "},
        Reinjected("writer_and_source", "hard_gate_rejected", "the item says its producer is '  '"), stored=STORED),
    Row("re-injected, producer padded", {**REINJECTED, "producer": " agent/v1"},
        Reinjected("writer_and_source", "hard_gate_rejected", "the item says its producer is ' agent/v1'"), stored=STORED),
    Row("re-injected, kind in other case", {**REINJECTED, "kind": "Background"},
        Reinjected("writer_and_source", "hard_gate_rejected", "stored kind is 'background'"), stored=STORED),
    Row("re-injected, revision exact, as text", {**REINJECTED, "revision": "5"}, Admitted(), stored=STORED),
    Row("re-injected, revision one above", {**REINJECTED, "revision": 6},
        Reinjected("content_hash_and_revision", "hard_gate_rejected", "the item declares 6"), stored=STORED),
    Row("re-injected, stored in another project", REINJECTED,
        Reinjected("scope_and_permission", "permission_denied", "in project 'project-z'"), stored={**STORED, "scope": "tenant-x/project-z"}),
    Row("re-injected, stored scope whitespace", REINJECTED,
        Reinjected("scope_and_permission", "permission_denied", "outside tenant 'tenant-x'"), stored={**STORED, "scope": " "}),
    Row("re-injected, stored for another task", REINJECTED,
        Reinjected("scope_and_permission", "permission_denied", "outside the request scope"), stored={**STORED, "scope": "tenant-x/project-y/task-2"}),
]


def verdict(row: Row):
    """The subject's fate as the engine decides it: Refused with the error lines, or its record."""
    req, pol = build(row)
    try:
        result = assemble(parse_request(req), parse_policy(pol), created_at=CREATED_AT, artifacts=store(row.stored))
    except InvalidInput as exc:
        return exc.errors, None
    return None, result


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_field_a_gate_reads_is_judged_by_the_rule_that_names_it(row: Row):
    errors, result = verdict(row)
    expect = row.expect
    if isinstance(expect, Refused):
        assert errors is not None, f"accepted; expected a refusal naming {expect.path}"
        assert any(e.startswith(expect.path + ":") or e.startswith(expect.path + ".") for e in errors), errors
        return
    assert errors is None, errors
    m = result.manifest
    if isinstance(expect, Admitted):
        assert "subject" in m.included_ids(), m.excluded_reasons().get("subject")
        return
    record = next((e for e in m.excluded if e.item_id == "subject"), None)
    assert record is not None, "admitted; expected an exclusion"
    if isinstance(expect, Reinjected):
        # Every hard gate passed; the clause of its own failed, named with its words.
        assert record.hard_gate is None and set(record.hard_gate_results.values()) == {"passed"}, (record.hard_gate, record.detail)
        assert record.reason.value == expect.reason, (record.reason, record.detail)
        assert f"re-injection clause {expect.clause} failed" in record.detail and expect.words in record.detail, record.detail
        return
    assert record.hard_gate is not None and record.hard_gate.value == expect.gate, (record.hard_gate, record.detail)
    assert record.reason.value == expect.reason, (record.reason, record.detail)
    assert expect.words in record.detail, record.detail
    _, pol = build(row)
    gates = order(pol)
    at = gates.index(expect.gate)
    assert {g: record.hard_gate_results[g] for g in gates} == {
        g: "passed" if n < at else "failed" if n == at else "not_evaluated" for n, g in enumerate(gates)
    }


def test_the_table_covers_every_gate_with_every_kind_of_value():
    """Guard on the table: each gate refuses something in it, and the six kinds of value each
    appear (a gate whose negative space is not in the table is not tested by it)."""
    refused_at = {r.expect.gate for r in ROWS if isinstance(r.expect, Excluded)}
    assert refused_at == set(GATES)
    words = " ".join(r.id for r in ROWS)
    for kind in ("absent", "empty", "whitespace", "wrong type", "case", "exact"):
        assert kind in words, kind
