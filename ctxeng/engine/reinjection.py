"""Stage 2b — re-injection: an externalized artifact re-enters only clause by clause (seed §7).

Contract: an item that names an `artifact_ref` is loaded from the artifact store the caller gives
(the service's tenant-scoped store, or the CLI's `--artifacts DIR`), never from the request, and
passes every clause of the policy's `reinjection.require`, each recorded in
`reinjection_checks` of its manifest record:

- object_identity: the store holds that artifact id (at that revision, when one is named);
- writer_and_source: the stored writer is the item's producer, and the stored kind is the item's kind;
- content_hash_and_revision: the stored hash is the item's `content_hash`, the stored revision its revision;
- scope_and_permission: the stored scope is the principal's tenant and project, within the request scope;
- trust_label: the item's trust does not rise above its source type's policy default;
- security_classification: the item's security class is not a secret class;
- freshness_or_refresh, trust_role_compatibility, structural_integrity, security_policy_compliance:
  the result of the hard gate of that name (they ran already; the record repeats their verdict);
- admission_reason: the item was given an admission reason when it was admitted (load stage).

A failing clause of its own (the first six) excludes the item: `permission_denied` for scope and
permission, `hard_gate_rejected` otherwise, naming the clause. Clauses the policy does not list are
not checked here (the hard gates still run on every item).
"""

from __future__ import annotations

from .gates import cross_scope_problem, is_secret_class, trust_ceiling
from .vocabulary import TRUST_RANK, ExclusionReason, GateResult, HardGate, ReinjectionClause
from .working import Assembly, Candidate, Exclusion

_GATE_CLAUSES = {
    ReinjectionClause.FRESHNESS_OR_REFRESH: HardGate.FRESHNESS,
    ReinjectionClause.TRUST_ROLE_COMPATIBILITY: HardGate.TRUST_ROLE_COMPATIBILITY,
    ReinjectionClause.STRUCTURAL_INTEGRITY: HardGate.STRUCTURAL_INTEGRITY,
    ReinjectionClause.SECURITY_POLICY_COMPLIANCE: HardGate.SECURITY_POLICY_COMPLIANCE,
}


def _own_clause(asm: Assembly, cand: Candidate, clause: ReinjectionClause) -> str | None:
    """Why `clause` fails for this re-injected item, or None when it holds."""
    item, stored, ref = cand.item, cand.stored_artifact, cand.item.artifact_ref
    assert ref is not None
    if clause == ReinjectionClause.OBJECT_IDENTITY:
        if stored is None:
            return f"the artifact store holds no {ref.artifact_id}" + (f"@{ref.revision}" if ref.revision is not None else "")
        return None
    if clause == ReinjectionClause.TRUST_LABEL:
        ceiling = trust_ceiling(asm, item.source_type)
        if cand.trust is None or ceiling is None or TRUST_RANK[cand.trust] > TRUST_RANK[ceiling]:
            return f"trust {cand.trust.value if cand.trust else None!r} is not within source type {item.source_type!r}'s default {ceiling.value if ceiling else None!r}"
        return None
    if clause == ReinjectionClause.SECURITY_CLASSIFICATION:
        if is_secret_class(asm, item.security_class):
            return f"security_class {item.security_class!r} is a secret class"
        return None
    if stored is None:
        return "no stored artifact to check against"
    if clause == ReinjectionClause.WRITER_AND_SOURCE:
        if item.producer and item.producer != stored.writer:
            return f"stored writer is {stored.writer!r}; the item says its producer is {item.producer!r}"
        if stored.kind != item.kind:
            return f"stored kind is {stored.kind!r}; the item says {item.kind!r}"
        return None
    if clause == ReinjectionClause.CONTENT_HASH_AND_REVISION:
        if stored.content_hash != item.content_hash:
            return f"stored content hash is {stored.content_hash}; the item declares {item.content_hash}"
        if item.revision is not None and str(item.revision) != str(stored.revision):
            return f"stored revision is {stored.revision!r}; the item declares {item.revision!r}"
        return None
    if clause == ReinjectionClause.SCOPE_AND_PERMISSION:
        problem = cross_scope_problem(asm, stored.scope)
        return f"stored artifact: {problem}" if problem else None
    raise AssertionError(clause)


def check_reinjected(asm: Assembly) -> None:
    for cand in asm.candidates:
        if cand.item.artifact_ref is None:
            continue
        checks: dict[str, GateResult] = {}
        failure: tuple[ReinjectionClause, str] | None = None
        for clause in asm.policy.reinjection.require:
            if clause in _GATE_CLAUSES:
                checks[clause.value] = cand.gate_results.get(_GATE_CLAUSES[clause].value, GateResult.NOT_EVALUATED)
            elif clause == ReinjectionClause.ADMISSION_REASON:
                checks[clause.value] = GateResult.NOT_EVALUATED  # settled by record_admission_reasons
            else:
                problem = _own_clause(asm, cand, clause)
                checks[clause.value] = GateResult.FAILED if problem else GateResult.PASSED
                if problem and failure is None:
                    failure = (clause, problem)
        cand.reinjection_checks = checks
        if failure is not None:
            clause, problem = failure
            reason = ExclusionReason.PERMISSION_DENIED if clause == ReinjectionClause.SCOPE_AND_PERMISSION else ExclusionReason.HARD_GATE_REJECTED
            cand.exclude(Exclusion(reason, f"re-injection clause {clause.value} failed: {problem}", "hard_gates"))


def record_admission_reasons(asm: Assembly) -> None:
    """After load modes: the admission_reason clause holds when the admitted item got a reason."""
    if ReinjectionClause.ADMISSION_REASON not in asm.policy.reinjection.require:
        return
    for cand in asm.candidates:
        if cand.item.artifact_ref is not None and cand.alive:
            cand.reinjection_checks[ReinjectionClause.ADMISSION_REASON.value] = (
                GateResult.PASSED if cand.admission_reason else GateResult.FAILED
            )
