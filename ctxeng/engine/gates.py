"""Stage 2 — hard gates, before any ranking (seed §2, invariant 2).

Contract: every candidate passes through the policy's `admission.hard_filters` in the order the
policy lists them. The first gate that fails excludes the item with that gate's reason and
detail; the gates after it are recorded `not_evaluated`, as the seed's manifest shows. A gate
only reads the item, the request and the policy: no ranking score, relevance or free budget can
influence it, and no later stage may revive an item a gate rejected (`Candidate.exclude` keeps the
first decision).

Gates are registered explicitly, in a fixed table, each mapping to the exclusion reason it gives:
permission and scope -> permission_denied, required revision -> stale_revision, freshness ->
expired / unverifiable / hard_gate_rejected (refresh required), trust-role and integrity ->
hard_gate_rejected, security -> security_rejected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .vocabulary import TRUST_RANK, ExclusionReason, Freshness, GateResult, HardGate, Role, Trust
from .working import Assembly, Candidate, Exclusion


@dataclass(frozen=True)
class GateOutcome:
    passed: bool
    reason: ExclusionReason | None = None
    detail: str = ""
    refresh_condition: str | None = None


PASS = GateOutcome(True)


def _fail(reason: ExclusionReason, detail: str, refresh: str | None = None) -> GateOutcome:
    return GateOutcome(False, reason, detail, refresh)


def _scope_parts(scope: str) -> list[str]:
    return [p for p in scope.split("/") if p]


def permission(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The principal's tenant must own the item: another tenant's data is never readable."""
    parts = _scope_parts(cand.item.scope)
    tenant = parts[0] if parts else ""
    if tenant != asm.request.principal.tenant:
        return _fail(
            ExclusionReason.PERMISSION_DENIED,
            f"item belongs to tenant {tenant!r}; principal {asm.request.principal.id!r} acts for "
            f"tenant {asm.request.principal.tenant!r}",
        )
    return PASS


def tenant_and_project_scope(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The item's scope must be the request's scope or one of its ancestors (project, tenant)."""
    item_scope = _scope_parts(cand.item.scope)
    request_scope = _scope_parts(asm.request.scope)
    if item_scope != request_scope[: len(item_scope)]:
        return _fail(
            ExclusionReason.PERMISSION_DENIED,
            f"scope {cand.item.scope!r} is outside the request scope {asm.request.scope!r} "
            f"(cross_scope_data: {asm.policy.security.cross_scope_data})",
        )
    return PASS


_REVISION_KEYS = ("artifact_id", "repo", "object_id", "memory_id", "document_id", "id")


def _actual_revision(cand: Candidate) -> object:
    ref = cand.item.source_ref
    for key in ("revision", "commit"):
        if ref.get(key) is not None:
            return ref[key]
    return cand.item.revision


def required_revision(asm: Assembly, cand: Candidate) -> GateOutcome:
    """An object named in `required_revisions` must be at exactly that revision."""
    required = asm.request.required_revisions
    ref = cand.item.source_ref
    for key in _REVISION_KEYS:
        name = ref.get(key)
        if isinstance(name, str) and name in required:
            want = required[name]
            have = _actual_revision(cand)
            if have is None or str(have) != str(want):
                return _fail(
                    ExclusionReason.STALE_REVISION,
                    f"{key} {name!r} is at revision {have!r}; the task requires {want!r}",
                    refresh=f"load_required_revision_{want}",
                )
    return PASS


def freshness(asm: Assembly, cand: Candidate) -> GateOutcome:
    state = cand.item.freshness
    rules = asm.policy.freshness
    if state == Freshness.VALID:
        return PASS
    if state == Freshness.EXPIRED:
        return _fail(ExclusionReason.EXPIRED, f"freshness is expired (policy: {rules.expired})")
    if state == Freshness.UNVERIFIABLE:
        return _fail(ExclusionReason.UNVERIFIABLE, f"freshness cannot be verified (policy: {rules.unverifiable})")
    return _fail(
        ExclusionReason.HARD_GATE_REJECTED,
        "freshness is refresh_required: the authoritative source must be fetched before admission",
        refresh=rules.refresh_required,
    )


def trust_role_compatibility(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The trust label must allow the intended role, and may not claim more than its source grants.

    Whatever the policy's `role_limits` say, the control role (the system message) takes only
    `control_authority` text from a source type the policy grants it: no role table can route
    untrusted text into the system message, and no label can claim control for an unknown source.
    """
    trust = cand.trust
    if trust is None:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"no trust label, and the policy has no default for source type {cand.item.source_type!r}",
        )
    ceiling = asm.policy.trust.default_by_source.get(cand.item.source_type)
    if ceiling is not None and TRUST_RANK[trust] > TRUST_RANK[ceiling]:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"trust {trust.value!r} is above what source type {cand.item.source_type!r} grants ({ceiling.value!r})",
        )
    if ceiling is None and trust == Trust.CONTROL_AUTHORITY:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"source type {cand.item.source_type!r} has no trust default in the policy, so it cannot claim control_authority",
        )
    if cand.role == Role.CONTROL and trust != Trust.CONTROL_AUTHORITY:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"only control_authority text may take the control role; this item is {trust.value!r}",
        )
    allowed = asm.policy.role_limits.get(trust, [])
    if cand.role not in allowed:
        names = ", ".join(r.value for r in allowed) or "none"
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"trust {trust.value!r} may not take role {cand.role.value!r} (allowed: {names})",
        )
    return PASS


# Each source type names the source_ref fields that locate it; any one alternative suffices.
REQUIRED_SOURCE_REF: dict[str, tuple[tuple[str, ...], ...]] = {
    "repository_source": (("repo", "commit", "path", "lines"),),
    "repository": (("repo", "commit", "path", "lines"),),
    "test_log": (("artifact_id",),),
    "official_document": (("url",), ("document_id",)),
    "web_document": (("url",),),
    "editable_project_file": (("artifact_id", "revision"), ("path",)),
    "artifact": (("artifact_id", "revision"),),
    "memory_object": (("memory_id",),),
    "model_summary": (("summary_id",),),
    "checkpoint_summary": (("summary_id",),),
    "trace": (("trace_id",),),
    "system_policy": (("object_id",),),
    "user_request": (("object_id",),),
    "runtime_state": (("object_id",),),
}


def _ref_complete(source_type: str, ref: dict) -> tuple[bool, str]:
    alternatives = REQUIRED_SOURCE_REF.get(source_type)
    if alternatives is None:
        return (bool(ref), "source_ref is empty")
    for fields in alternatives:
        if all(ref.get(f) not in (None, "") for f in fields):
            return True, ""
    wanted = " or ".join("+".join(f) for f in alternatives)
    return False, f"source_ref for {source_type!r} needs {wanted}"


def structural_integrity(asm: Assembly, cand: Candidate) -> GateOutcome:
    """Content matches its hash, the source_ref is complete for its type, lineage ends at this item."""
    item = cand.item
    if item.content is None and not cand.content:
        ref = item.artifact_ref
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"artifact {ref.artifact_id if ref else '?'}@{ref.revision if ref else '?'} could not be loaded",
        )
    actual = cand.digest  # gates run before any transform, so this is the content as received
    if actual != item.content_hash:
        return _fail(ExclusionReason.HARD_GATE_REJECTED, f"content hash mismatch: declared {item.content_hash}, content is {actual}")
    ok, why = _ref_complete(item.source_type, item.source_ref)
    if not ok:
        return _fail(ExclusionReason.HARD_GATE_REJECTED, why)
    declared = item.source_ref.get("content_hash")
    if isinstance(declared, str) and declared != item.content_hash:
        return _fail(ExclusionReason.HARD_GATE_REJECTED, "source_ref.content_hash differs from the item's content_hash")
    if item.source_lineage:
        last = item.source_lineage[-1]
        if last.node_id == item.item_id and last.digest is not None and last.digest != item.content_hash:
            return _fail(ExclusionReason.HARD_GATE_REJECTED, "the last source_lineage node's digest differs from content_hash")
        known = set()
        for node in item.source_lineage:
            missing = [i for i in node.input_node_ids if i not in known]
            if missing:
                return _fail(ExclusionReason.HARD_GATE_REJECTED, f"source_lineage node {node.node_id!r} names unknown inputs {missing}")
            known.add(node.node_id)
    return PASS


_SECRET_PATTERNS = re.compile(
    r"(sk-(?:live|proj|test)?-?[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|ghp_[A-Za-z0-9]{36}|xox[baprs]-[A-Za-z0-9-]{10,})"
)
# Every match starts with one of these literals; a substring test is ~10x faster than the regex
# scan over megabytes of clean content, so the regex runs only where one occurs.
_SECRET_PREFIXES = ("sk-", "AKIA", "-----BEGIN ", "ghp_", "xox")


def _find_secret(text: str) -> re.Match[str] | None:
    if not any(p in text for p in _SECRET_PREFIXES):
        return None
    return _SECRET_PATTERNS.search(text)


def security_policy_compliance(asm: Assembly, cand: Candidate) -> GateOutcome:
    """Secret material is denied; untrusted text is admitted only as isolated data."""
    sec = asm.policy.security
    assessment = {
        "external_instruction_isolation": "isolated_as_data" if cand.role in (Role.UNTRUSTED_DATA, Role.DERIVED_CONTEXT) else "passed",
        "secret_handling": "passed",
        "cross_scope_check": "passed",
    }
    cand.security_assessment = assessment
    if cand.item.security_class in sec.secret_classes:
        assessment["secret_handling"] = "failed"
        return _fail(ExclusionReason.SECURITY_REJECTED, f"security_class {cand.item.security_class!r} is secret material (policy: {sec.secret_material})")
    match = _find_secret(cand.content)
    if match:
        assessment["secret_handling"] = "failed"
        return _fail(ExclusionReason.SECURITY_REJECTED, f"content carries credential-like material at offset {match.start()} (policy: {sec.secret_material})")
    return PASS


GateFn = Callable[[Assembly, Candidate], GateOutcome]

GATES: dict[HardGate, GateFn] = {
    HardGate.PERMISSION: permission,
    HardGate.TENANT_AND_PROJECT_SCOPE: tenant_and_project_scope,
    HardGate.REQUIRED_REVISION: required_revision,
    HardGate.FRESHNESS: freshness,
    HardGate.TRUST_ROLE_COMPATIBILITY: trust_role_compatibility,
    HardGate.STRUCTURAL_INTEGRITY: structural_integrity,
    HardGate.SECURITY_POLICY_COMPLIANCE: security_policy_compliance,
}


def apply_hard_gates(asm: Assembly) -> None:
    order = asm.policy.admission.hard_filters
    for cand in asm.candidates:
        results: dict[str, GateResult] = {}
        failed = False
        for gate in order:
            if failed:
                results[gate.value] = GateResult.NOT_EVALUATED
                continue
            outcome = GATES[gate](asm, cand)
            results[gate.value] = GateResult.PASSED if outcome.passed else GateResult.FAILED
            if not outcome.passed:
                failed = True
                assert outcome.reason is not None
                cand.exclude(Exclusion(outcome.reason, outcome.detail, "hard_gates", gate, outcome.refresh_condition))
        cand.gate_results = results
        if failed and not cand.security_assessment:
            cand.security_assessment = {"status": f"not_evaluated_after_{cand.exclusion.hard_gate.value}_failure"}  # type: ignore[union-attr]
