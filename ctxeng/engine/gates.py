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

A derived item (a summary, an excerpt, a merge) is judged after the candidates it declares as
inputs — in `input_item_ids`, as a node of its `source_lineage` (`declared_inputs`), or as a
lineage node's `digest` that is the content of a candidate, whatever the node is called — and passes
a gate only if each of them did: an input a gate excluded excludes it at that gate with the
input's reason (seed §2: no later stage rescues an unauthorised, stale or incomplete object; an
excerpt's own source_ref cannot launder an input its lineage names). Standing is transitive: an
input is itself judged after its inputs. Inputs outside the request are judged through its own
`source_refs`, which the required_revision gate holds to `required_revisions` as it holds a source.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from . import versions
from .hashing import sha256_json, sha256_text
from .lifecycle import named_artifact
from .limits import is_blank
from .memo import Memo, kept_by_value
from .models import LifecycleEventRecord, LineageNode, TransformRecord
from .ranking import is_pinned
from .render import block_tokens
from .secrets import Finding, find_secrets, given_findings, json_strings, kept_findings
from .structure import incomplete
from .vocabulary import (
    AUTHORITY_TRUST,
    EXTERNALIZATION_SOURCE_TYPES,
    TRUST_RANK,
    AcquisitionOutcome,
    AssertionResult,
    BlockedReason,
    ExclusionReason,
    ExternalizationTarget,
    Freshness,
    GateResult,
    HardGate,
    LifecycleEvent,
    ProducerCheck,
    Role,
    SecurityAssessment,
    TransformType,
    Trust,
)
from .working import Assembly, Candidate, Exclusion


@dataclass(frozen=True)
class GateOutcome:
    passed: bool
    reason: ExclusionReason | None = None
    detail: str = ""
    refresh_condition: str | None = None
    event: str | None = None


PASS = GateOutcome(True)

DATA_ROLES = (Role.UNTRUSTED_DATA, Role.DERIVED_CONTEXT)
TOOL_RESULT_FORBIDDEN_ROLES = (Role.CONTROL, Role.TASK_INTENT)
AGENT_OUTPUT_SOURCE_TYPES = ("agent_output",)


def _fail(reason: ExclusionReason, detail: str, refresh: str | None = None, event: str | None = None) -> GateOutcome:
    return GateOutcome(False, reason, detail, refresh, event)


def _scope_parts(scope: str) -> list[str]:
    return [p for p in scope.split("/") if p]


# --------------------------------------------------------------------------- lifecycle events


def _event_hits(event: LifecycleEventRecord, cand: Candidate) -> bool:
    item = cand.item
    if event.item_id is not None:
        return event.item_id == item.item_id
    if event.scope is not None:
        want = _scope_parts(event.scope)
        return _scope_parts(item.scope)[: len(want)] == want
    named = named_artifact(item)
    if named is None or named[0] != event.artifact_id:
        return False
    return event.revision is None or named[1] == str(event.revision)


def _event_outcome(asm: Assembly, cand: Candidate, kinds: tuple[LifecycleEvent, ...]) -> GateOutcome | None:
    for event in asm.request.lifecycle_events:
        if event.event in kinds and _event_hits(event, cand):
            target = event.item_id or event.scope or f"{event.artifact_id}" + (f"@{event.revision}" if event.revision is not None else "")
            detail = f"lifecycle event {event.event.value} ({event.emitted_by}) for {target}" + (f": {event.detail}" if event.detail else "")
            if event.event == LifecycleEvent.PERMISSION_REVOKED:
                return _fail(ExclusionReason.PERMISSION_DENIED, detail, "permission_granted_again", event.event.value)
            refresh = {
                LifecycleEvent.SOURCE_EXPIRED: "fetch_authoritative_source_before_admission",
                LifecycleEvent.REVISION_REPLACED: "load_current_revision",
                LifecycleEvent.TASK_CLOSED: "reopen_task",
            }[event.event]
            return _fail(ExclusionReason.EXPIRED, detail, refresh, event.event.value)
    return None


# --------------------------------------------------------------------------- the gates


def permission(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The principal's tenant must own the item, and no permission_revoked event may hit it."""
    parts = _scope_parts(cand.item.scope)
    tenant = parts[0] if parts else ""
    if tenant != asm.request.principal.tenant:
        return _fail(
            ExclusionReason.PERMISSION_DENIED,
            f"item belongs to tenant {tenant!r}; principal {asm.request.principal.id!r} acts for "
            f"tenant {asm.request.principal.tenant!r}",
        )
    return _event_outcome(asm, cand, (LifecycleEvent.PERMISSION_REVOKED,)) or PASS


def cross_scope_problem(asm: Assembly, scope: str) -> str | None:
    """Why `scope` is outside what the principal may read for this request, or None.

    The scope's tenant and project segments must be the principal's, and the scope must be the
    request's scope or one of its ancestors (another task of the same project is out of scope too).
    Items share a handful of scopes, so each is judged once per assembly (two gates ask).
    """
    if scope not in asm.scope_problems:
        asm.scope_problems[scope] = _cross_scope_problem(asm, scope)
    return asm.scope_problems[scope]


def _cross_scope_problem(asm: Assembly, scope: str) -> str | None:
    principal = asm.request.principal
    item_scope = _scope_parts(scope)
    if item_scope[:1] != [principal.tenant]:
        return f"scope {scope!r} is outside tenant {principal.tenant!r}"
    if len(item_scope) > 1 and item_scope[1] != principal.project:
        return f"scope {scope!r} is in project {item_scope[1]!r}; principal {principal.id!r} works in project {principal.project!r}"
    request_scope = _scope_parts(asm.request.scope)
    if item_scope != request_scope[: len(item_scope)]:
        return f"scope {scope!r} is outside the request scope {asm.request.scope!r}"
    return None


def tenant_and_project_scope(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The item's tenant and project are the principal's, and its scope is the request's or an ancestor."""
    problem = cross_scope_problem(asm, cand.item.scope)
    if problem:
        return _fail(ExclusionReason.PERMISSION_DENIED, f"{problem} (cross_scope_data: {asm.policy.security.cross_scope_data})")
    return PASS


_REVISION_KEYS = ("artifact_id", "repo", "object_id", "memory_id", "document_id", "id")


def _actual_revision(cand: Candidate) -> object:
    ref = cand.item.source_ref
    for key in ("revision", "commit"):
        if ref.get(key) is not None:
            return ref[key]
    return cand.item.revision


def current_draft(asm: Assembly) -> tuple[object, str | None]:
    """The article_draft revision (and, when the draft is among the candidates, its content hash)
    a review decision must approve: the runtime's word first, else the newest draft candidate."""
    state = asm.request.runtime_state
    drafts = [c.item for c in asm.candidates if c.item.kind == "article_draft" and c.item.revision is not None]
    want = state.article_draft_revision if state is not None else None
    if want is None and drafts:
        want = max(drafts, key=lambda i: (str(type(i.revision)), i.revision)).revision  # type: ignore[arg-type]
    hashes = [i.content_hash for i in drafts if str(i.revision) == str(want)]
    return want, (hashes[0] if hashes else None)


def _stale(asm: Assembly, ref: dict, have: object, where: str = "") -> GateOutcome | None:
    """The stale_revision outcome when `ref` names an object of `required_revisions` at another revision."""
    if asm.required_revisions is None:
        asm.required_revisions = asm.request.required_revision_map()
    required = asm.required_revisions
    for key in _REVISION_KEYS:
        name = ref.get(key)
        if isinstance(name, str) and name in required:
            want, source = required[name]
            if have is None or str(have) != str(want):
                return _fail(
                    ExclusionReason.STALE_REVISION,
                    f"{where}{key} {name!r} is at revision {have!r}; {source.value} requires {want!r}",
                    refresh=f"load_required_revision_{want}",
                )
    return None


def required_revision(asm: Assembly, cand: Candidate) -> GateOutcome:
    """An object named in `required_revisions` must be at exactly that revision; so must each of a
    derived item's `source_refs` (seed §6: refs and revisions survive a transform; they are how
    inputs outside the request are judged); a review decision must approve the current
    article_draft revision and content. A reading of an object that changed after it (a later
    write, a reading at a higher revision, a later reading that differs where they overlap:
    `versions.judge`) is stale, naming the event."""
    ref = cand.item.source_ref
    stale = _stale(asm, ref, _actual_revision(cand))
    if stale is not None:
        return stale
    why = versions.judge(asm).stale.get(cand.item_id)
    if why is not None:
        return _fail(ExclusionReason.STALE_REVISION, why, refresh="use_the_newest_revision")
    for n, cited in enumerate(cand.item.source_refs or []):
        have = next((cited[k] for k in ("revision", "commit") if cited.get(k) is not None), None)
        stale = _stale(asm, cited, have, f"source_refs[{n}]: ")
        if stale is not None:
            return stale
    if cand.item.kind == "review_decision":
        want, want_hash = current_draft(asm)
        bound, bound_hash = ref.get("draft_revision"), ref.get("draft_content_hash")
        if want is not None and bound is not None and str(bound) != str(want):
            return _fail(
                ExclusionReason.STALE_REVISION,
                f"review decision approves article_draft revision {bound!r}; the current draft is revision {want!r}",
                refresh=f"review_article_draft_revision_{want}",
            )
        if want_hash is not None and bound_hash is not None and bound_hash != want_hash:
            return _fail(
                ExclusionReason.STALE_REVISION,
                f"review decision approves draft content {bound_hash}; the current draft's content is {want_hash}",
                refresh=f"review_article_draft_revision_{want}",
            )
    return PASS


def freshness(asm: Assembly, cand: Candidate) -> GateOutcome:
    """Controlled freshness states (policy `freshness`), then lifetime events (policy `expiry.on`)."""
    state = cand.item.freshness
    rules = asm.policy.freshness
    if state not in rules.states:
        return _fail(
            ExclusionReason.UNVERIFIABLE,
            f"freshness {state.value!r} is not a state policy {asm.policy.label} recognizes (freshness.states)",
        )
    if state == Freshness.EXPIRED:
        return _fail(ExclusionReason.EXPIRED, f"freshness is expired (policy: {rules.expired})")
    if state == Freshness.UNVERIFIABLE:
        return _fail(ExclusionReason.UNVERIFIABLE, f"freshness cannot be verified (policy: {rules.unverifiable})")
    if state == Freshness.REFRESH_REQUIRED:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            "freshness is refresh_required: the authoritative source must be fetched before admission",
            refresh=rules.refresh_required,
        )
    expiring = (LifecycleEvent.SOURCE_EXPIRED, LifecycleEvent.REVISION_REPLACED, LifecycleEvent.TASK_CLOSED)
    return _event_outcome(asm, cand, expiring) or PASS


# The engine's own structured checkpoint summary (built from request.checkpoint) is derived context
# by construction; a policy may lower that, never raise it above derived_context's role limits.
ENGINE_SOURCE_DEFAULTS: dict[str, Trust] = {"checkpoint_summary": Trust.DERIVED_CONTEXT}


def trust_ceiling(asm: Assembly, source_type: str) -> Trust | None:
    """The most trust an item of this source type may carry: the policy's default, else none."""
    default = asm.policy.trust.default_by_source.get(source_type)
    return default if default is not None else ENGINE_SOURCE_DEFAULTS.get(source_type)


def producer_check(asm: Assembly, cand: Candidate) -> tuple[ProducerCheck, str | None]:
    """Is the item's producer one `trust.producers` lists for its source type (seed §2: a source's
    identity is not what it says about itself)? Only authority source types are bound; a bound
    type's item from any other producer fails, naming the producer. An authority type the policy
    binds to nobody is `not_configured`, never `passed`: nothing was checked."""
    source_type = cand.item.source_type
    if trust_ceiling(asm, source_type) not in AUTHORITY_TRUST:
        return ProducerCheck.NOT_APPLICABLE, None
    allowed = asm.policy.trust.producers.get(source_type)
    if allowed is None:
        return ProducerCheck.NOT_CONFIGURED, None
    if cand.item.producer in allowed:
        return ProducerCheck.PASSED, None
    return ProducerCheck.FAILED, (
        f"producer {cand.item.producer!r} may not emit source type {source_type!r} "
        f"(trust.producers.{source_type}: {', '.join(allowed)})"
    )


def trust_role_compatibility(asm: Assembly, cand: Candidate) -> GateOutcome:
    """The trust label must allow the intended role, and may not claim more than its source grants.

    A source type with no trust default in the policy (web pages, other agents' output, traces,
    anything new) may only be untrusted data, whatever it claims. Whatever the policy's
    `role_limits` say, the control role takes only `control_authority` text. Other agents' output
    enters only with source_refs and a producer identity (seed §2 case decision). An authority
    source type `trust.producers` binds enters only from a listed producer (`producer_check`), and
    a tool result only as data: it is serialized as its call's result, whatever role it claims.
    """
    trust = cand.trust
    source_type = cand.item.source_type
    cand.producer_check, producer_problem = producer_check(asm, cand)
    if producer_problem:
        return _fail(ExclusionReason.HARD_GATE_REJECTED, producer_problem)
    if trust is None:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"no trust label, and the policy has no default for source type {source_type!r}",
        )
    if cand.item.call_id is not None and cand.role in TOOL_RESULT_FORBIDDEN_ROLES:
        # A result is serialized as its call's answer, a fenced block in a tool message: it can be
        # state (a policy's default_by_source may make a tool's output trusted_state) or data, but
        # never the system text or the user's words, which have their own messages; in those roles
        # it could never be placed, and would block the whole assembly at the output checks instead.
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"a tool result (call {cand.item.call_id!r}) is placed as its call's result; it cannot take role {cand.role.value!r}",
        )
    ceiling = trust_ceiling(asm, source_type)
    if ceiling is not None and TRUST_RANK[trust] > TRUST_RANK[ceiling]:
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"trust {trust.value!r} is above what source type {source_type!r} grants ({ceiling.value!r})",
        )
    if ceiling is None and (cand.role != Role.UNTRUSTED_DATA or trust in AUTHORITY_TRUST):
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"source type {source_type!r} has no trust default in the policy, so it may only be untrusted data; "
            f"it claims trust {trust.value!r} in role {cand.role.value!r}",
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
    if source_type in AGENT_OUTPUT_SOURCE_TYPES:
        missing = [name for name, ok in (("source_refs", bool(cand.item.source_refs)), ("producer", not is_blank(cand.item.producer))) if not ok]
        if missing:
            return _fail(
                ExclusionReason.HARD_GATE_REJECTED,
                f"another agent's output enters only with source_refs and a producer identity; missing {' and '.join(missing)}",
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


def _locates(value: object) -> bool:
    """Does a source_ref field say something? Not when absent, null, a blank string (whitespace or
    invisible characters locate nothing) or an empty list or object; 0 and false are values."""
    if value is None:
        return False
    if isinstance(value, str):
        return not is_blank(value)
    if isinstance(value, (list, dict)):
        return bool(value)
    return True


def _ref_complete(source_type: str, ref: dict) -> tuple[bool, str]:
    alternatives = REQUIRED_SOURCE_REF.get(source_type)
    if alternatives is None:
        return (bool(ref), "source_ref is empty")
    for fields in alternatives:
        if all(_locates(ref.get(f)) for f in fields):
            return True, ""
    wanted = " or ".join("+".join(f) for f in alternatives)
    return False, f"source_ref for {source_type!r} needs {wanted}"


def structural_integrity(asm: Assembly, cand: Candidate) -> GateOutcome:
    """Content matches its hash, the source_ref is complete for its type, lineage ends at this item;
    a non-tool item is complete unless `admission.allow_incomplete` admits it as diagnostic."""
    item = cand.received or cand.item  # judged as received, also when a redaction ran first
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
    if incomplete(item) and "diagnostic" not in asm.policy.admission.allow_incomplete:
        # Seed §9 invariant 4: a low-integrity object never enters because there is room for it.
        return _fail(
            ExclusionReason.HARD_GATE_REJECTED,
            f"completeness {item.completeness!r}: an incomplete item is not admitted (admission.allow_incomplete "
            "does not list diagnostic, which would admit it as diagnostic_only)",
        )
    problem = _provenance_problem(asm, cand) or _externalization_problem(asm, cand)
    if problem:
        return _fail(ExclusionReason.HARD_GATE_REJECTED, problem)
    if item.kind == "review_decision":
        unbound = [f for f in ("draft_revision", "draft_content_hash") if item.source_ref.get(f) in (None, "")]
        if unbound:
            return _fail(
                ExclusionReason.HARD_GATE_REJECTED,
                f"a review_decision must bind the article_draft it approves: source_ref lacks {' and '.join(unbound)}",
            )
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


def _provenance_problem(asm: Assembly, cand: Candidate) -> str | None:
    """A candidate naming a source request must come from a retrieved one, matching its result_digest."""
    rid = cand.item.source_request_id
    if rid is None:
        return None
    record = asm.acquisitions.get(rid)
    if record is None:
        return f"source_request_id {rid!r} names no source request in source_acquisition"
    if record.outcome != AcquisitionOutcome.RETRIEVED:
        return f"source request {rid!r} was {record.outcome.value}: nothing can have come from it"
    if record.result_digest is not None:
        produced = asm.produced_by.get(rid, [])
        actual = produced[0] if len(produced) == 1 else sha256_json(sorted(produced))
        if actual != record.result_digest:
            return (
                f"source request {rid!r} recorded result_digest {record.result_digest}; "
                f"the {len(produced)} item(s) naming it digest to {actual}"
            )
    return None


def _externalization_problem(asm: Assembly, cand: Candidate) -> str | None:
    """Externalized objects re-enter only from a target the policy externalizes to."""
    targets = asm.policy.externalization.targets
    if cand.item.artifact_ref is not None and ExternalizationTarget.ARTIFACT_STORE not in targets:
        return "re-injected from the artifact store, which is not among the policy's externalization.targets"
    for target, source_types in EXTERNALIZATION_SOURCE_TYPES.items():
        if cand.item.source_type in source_types and target not in targets:
            return f"source type {cand.item.source_type!r} comes from externalization target {target.value!r}, which the policy does not list"
    return None


REDACTION = "[ctxeng:redacted credential]"
_SECRET_BODY = re.compile(r"[A-Za-z0-9]{16,}")
REDACTOR = "ctxeng-redact/2 (detect-secrets)"


def _find_secret(text: str) -> Finding | None:
    """The first credential-like span of `text` (ctxeng.engine.secrets: detect-secrets' plugins)."""
    found = find_secrets(text)
    return found[0] if found else None


def _finding_types(found: list[Finding]) -> str:
    """Each finding's type, in text order, once, with how often it occurs: the assessment's record."""
    counts: dict[str, int] = {}
    for f in found:
        counts[f.type] = counts.get(f.type, 0) + 1
    return ", ".join(t if n == 1 else f"{t} ({n})" for t, n in counts.items())


def _isolation(cand: Candidate) -> str:
    """Text without authority (anything but control/task/state trust) may never instruct: it sits in
    a data role, or (memory, where role_limits allow) fenced in the state zone; never control or task."""
    if cand.trust in AUTHORITY_TRUST:
        return "passed"
    if cand.role in DATA_ROLES:
        return "isolated_as_data"
    return "fenced_as_state" if cand.role == Role.STATE else "failed"


def security_policy_compliance(asm: Assembly, cand: Candidate) -> GateOutcome:
    """Performs every `security.required_assessments` entry and records each one's own result.

    - external_instruction_isolation: text without authority is in a data role (fenced as data);
    - secret_handling: a secret security class is denied; credential-like spans in the content are
      redacted under `secret_material: deny_or_redact` (a recorded transform) and denied under `deny`;
    - cross_scope_check: the item's scope is the principal's tenant and project and the request's.
    The gate fails when any assessment failed.
    """
    sec = asm.policy.security
    assessment: dict[str, str] = {}
    failures: list[str] = []
    for name in sec.required_assessments:
        if name == SecurityAssessment.EXTERNAL_INSTRUCTION_ISOLATION:
            result = _isolation(cand)
            if result == "failed":
                failures.append(f"{cand.trust.value if cand.trust else 'unlabelled'} text in role {cand.role.value!r} is not isolated as data")
        elif name == SecurityAssessment.SECRET_HANDLING:
            result, why = _secret_handling(asm, cand)
            if why:
                failures.append(why)
        else:
            problem = cross_scope_problem(asm, cand.item.scope)
            result = "failed" if problem else "passed"
            if problem:
                failures.append(problem)
        assessment[name.value] = result
    if cand.secret_findings:
        assessment["secret_findings"] = cand.secret_findings
    cand.security_assessment = assessment
    if failures:
        return _fail(ExclusionReason.SECURITY_REJECTED, "; ".join(failures))
    return PASS


def is_secret_class(asm: Assembly, security_class: str) -> bool:
    """Is `security_class` one of the policy's `security.secret_classes`? Compared without case or
    surrounding whitespace: `SECRET` and ` secret ` are the secret class, not a way past it."""
    classes = tuple(asm.policy.security.secret_classes)
    folded = _SECRET_CLASSES.kept(classes, lambda: frozenset(c.strip().casefold() for c in classes))
    return security_class.strip().casefold() in folded


# The folded secret classes by the policy's list (asked once per candidate; a policy has a few).
_SECRET_CLASSES: Memo[frozenset[str]] = Memo(64)


def _secret_handling(asm: Assembly, cand: Candidate) -> tuple[str, str | None]:
    sec = asm.policy.security
    if is_secret_class(asm, cand.item.security_class):
        return "failed", f"security_class {cand.item.security_class!r} is secret material (policy: {sec.secret_material})"
    found = find_secrets(cand.content, cand.content_digest or None)
    in_ref = _ref_secrets(cand.item.source_ref)
    if not found and not in_ref:
        return "passed", None
    # Each finding by type in the assessment (`secret_findings`), whatever the policy does with it.
    cand.secret_findings = _finding_types(found + [f for _, _, fs in in_ref for f in fs])
    if sec.secret_material == "deny":
        where = f"content carries credential-like material ({cand.secret_findings}) at offset {found[0].start}" if found else (
            f"{in_ref[0][0]} carries credential-like material ({cand.secret_findings})")
        return "failed", f"{where} (policy: deny)"
    return ("redacted", None) if _redact(asm, cand, found, in_ref) else ("failed", f"credential-like material ({cand.secret_findings}) could not be redacted")


def _ref_secrets(ref: object, path: str = "source_ref") -> list[tuple[str, tuple, list[Finding]]]:
    """Every string of a source_ref (a URL with userinfo or a token in its query, a header) that
    carries credential-like material: (its field path, its key path, the findings). The ref is
    written into the block's header, so it reaches the payload as the content does. Each string is
    scanned alone (cached by digest: an agent sends the same refs at every step), and the answer is
    kept by the ref's frozen JSON and path (`memo`)."""
    return given_findings(kept_by_value(_REF_SECRETS, ref, lambda: kept_findings(_scanned_ref(ref, path)), path))


_REF_SECRETS: Memo[tuple] = Memo(32_768)


def _scanned_ref(ref: object, path: str) -> list[tuple[str, tuple, list[Finding]]]:
    return [(where, keys, found) for where, keys, text in json_strings(ref, path) if (found := find_secrets(text))]


def redacted_text(text: str, found: list[Finding]) -> str:
    """`text` with each finding's span replaced by REDACTION."""
    if not found:
        return text
    spans = [f.span() for f in found]
    return "".join(text[a:b] + REDACTION for a, b in zip([0] + [e for _, e in spans[:-1]], [s for s, _ in spans], strict=True)) + text[spans[-1][1]:]


def _redacted_ref(ref: dict, in_ref: list[tuple[str, tuple, list[Finding]]]) -> dict:
    import copy

    out = copy.deepcopy(ref)
    for _, keys, found in in_ref:
        holder = out
        for k in keys[:-1]:
            holder = holder[k]
        holder[keys[-1]] = redacted_text(holder[keys[-1]], found)
    return out


def _redact(asm: Assembly, cand: Candidate, found: list[Finding], in_ref: list | None = None) -> bool:
    """Replace every credential-like span (of the content and of the source_ref's strings), check
    the result, record it as a transform."""
    in_ref = in_ref or []
    before = cand.content
    spans = [f.span() for f in found]
    out = redacted_text(before, found)
    ref_before = [f.text for _, _, fs in in_ref for f in fs]
    # Checked from facts the substitution did not produce: the secret *bodies* (the long
    # alphanumeric runs inside each match) must occur nowhere in the output, so a credential that
    # also appears in a form the patterns miss (without its prefix, say) fails the redaction; and
    # the kept text is rebuilt from the matched spans.
    kept = "".join(before[a:b] for a, b in zip([0] + [e for _, e in spans], [s for s, _ in spans] + [len(before)], strict=True))
    bodies = {body for a, b in spans for body in _SECRET_BODY.findall(before[a:b])}
    bodies |= {body for text in ref_before for body in _SECRET_BODY.findall(text)}
    ref_out = _redacted_ref(cand.item.source_ref, in_ref) if in_ref else cand.item.source_ref
    ref_text = json.dumps(ref_out, sort_keys=True, default=str)
    assertions = {
        "no_credential_left": AssertionResult.FAILED if any(body in out or body in ref_text for body in bodies) else AssertionResult.PASSED,
        "other_text_kept": AssertionResult.PASSED if out.replace(REDACTION, "") == kept and out.count(REDACTION) == len(spans) else AssertionResult.FAILED,
    }
    failed = [k for k, v in assertions.items() if v == AssertionResult.FAILED]
    record_id = f"transform-{cand.item_id}-redact"
    derived = _redacted_item(cand, out, record_id, ref_out)
    after_tokens = block_tokens(asm, dataclasses.replace(cand, item=derived, content=out, changed_digest=derived.content_hash))
    trust = cand.trust.value if cand.trust else "unlabelled"
    asm.transforms.append(
        TransformRecord(
            record_id=record_id,
            type=TransformType.REDACT,
            input_item_ids=[cand.item_id],
            input_digest=cand.item.content_hash,
            objective=f"redact {len(spans) + len(ref_before)} credential-like span(s): "
            f"{_finding_types(found + [f for _, _, fs in in_ref for f in fs])}"
            + (f" (in {', '.join(w for w, _, _ in in_ref)})" if in_ref else "") + " (security.secret_material: deny_or_redact)",
            policy_version=asm.policy.label,
            transformer_version=REDACTOR,
            output_item_id=cand.item_id,
            output_digest=None if failed else sha256_text(out),
            preservation_assertions=assertions,
            token_estimate_before=cand.tokens,
            token_estimate_after=None if failed else after_tokens,
            trust_before=trust,
            trust_after=trust,
            status="blocked" if failed else "applied",
            before_excerpt="",  # the excerpt would show the credential
            after_excerpt="" if failed else out[:1200],
        )
    )
    cand.transform_record_id = record_id
    if failed:
        return False
    cand.received = cand.received or cand.item
    cand.item = derived
    cand.content = out
    cand.changed_digest = derived.content_hash
    cand.tokens = after_tokens
    return True


def _redacted_item(cand: Candidate, out: str, record_id: str, source_ref: dict | None = None):
    """The redacted text as a derived item, as any transform's output: the content hash its fence
    header and manifest record name is the hash of what is delivered; the lineage says how."""
    received = cand.item
    out_digest = sha256_text(out)
    lineage = list(received.source_lineage) or [
        LineageNode(node_id=f"{cand.item_id}@received", type=received.source_type, digest=received.content_hash)
    ]
    lineage.append(
        LineageNode(
            node_id=f"{cand.item_id}#redact",
            type=TransformType.REDACT.value,
            digest=out_digest,
            input_node_ids=[lineage[-1].node_id],
            input_digest=received.content_hash,
            transform_record_id=record_id,
        )
    )
    update = {"content": out, "content_hash": out_digest, "source_lineage": lineage}
    if source_ref is not None and source_ref != received.source_ref:
        update["source_ref"] = source_ref
    return received.model_copy(update=update)


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


# --------------------------------------------------------------------------- derived items


def declared_inputs(item) -> list[str]:
    """Every item a candidate declares it was derived from (seed §2, §4): its `input_item_ids`, then
    the nodes of its `source_lineage` other than itself, in order, each once. An excerpt whose
    lineage names an item as its input derives from that item, whatever its own source_ref claims."""
    out: list[str] = []
    for i in [*(item.input_item_ids or ()), *(node.node_id for node in item.source_lineage)]:
        if i != item.item_id and i not in out:
            out.append(i)
    return out


def declared_digests(item) -> list[str]:
    """The content digests an item's `source_lineage` nodes declare, other than its own content's."""
    out: list[str] = []
    for node in item.source_lineage:
        if node.digest and node.digest != item.content_hash and node.digest not in out:
            out.append(node.digest)
    return out


def candidate_index(asm: Assembly) -> dict:
    """The candidates by item id, and (under `("digest", <content_hash>)`) each content digest's
    candidates as received: a lineage node is matched by its digest as well as its id."""
    index: dict = dict(asm.by_id())
    for cand in asm.candidates:
        index.setdefault(("digest", (cand.received or cand.item).content_hash), []).append(cand)
    return index


def _candidate_inputs(cand: Candidate, by_id: dict) -> list[tuple[str, Candidate]]:
    """The declared inputs of a derived item (summary, excerpt, merge) that are candidates of this
    assembly: named in `input_item_ids` or as a `source_lineage` node, or holding the content a
    lineage node's `digest` names — whatever the node is called (a renamed root cannot launder a
    stale or excluded read)."""
    if not cand.item.input_item_ids and not cand.item.source_lineage:  # nothing declared (every message of a history)
        return []
    out = [(i, c) for i in declared_inputs(cand.item) if (c := by_id.get(i)) is not None and c is not cand]
    for digest in declared_digests(cand.item):
        for c in by_id.get(("digest", digest), ()):
            if c is not cand and all(c is not seen for _, seen in out):
                out.append((c.item_id, c))
    return out


def inputs_first(asm: Assembly, by_id: dict) -> list[Candidate]:
    """The candidates in request order, except that a derived item comes after the candidates it
    names as inputs, so their gate outcomes are known when it is judged; items whose inputs name
    each other come last (and fail: an input never judged first is no admitted input)."""
    waiting: dict[str, list[Candidate]] = {}
    pending: dict[int, int] = {}
    queue: deque[Candidate] = deque()
    for cand in asm.candidates:
        inputs = {i for i, _ in _candidate_inputs(cand, by_id)}
        pending[id(cand)] = len(inputs)
        for i in inputs:
            waiting.setdefault(i, []).append(cand)
        if not inputs:
            queue.append(cand)
    order: list[Candidate] = []
    while queue:
        cand = queue.popleft()
        order.append(cand)
        for dependent in waiting.get(cand.item_id, ()):
            pending[id(dependent)] -= 1
            if pending[id(dependent)] == 0:
                queue.append(dependent)
    return order + [c for c in asm.candidates if pending[id(c)] > 0]


def inherited(cand: Candidate, gate: HardGate, by_id: dict) -> GateOutcome:
    """A derived item passes a gate only if each of its inputs among the candidates did (seed §2: no
    later stage rescues an unauthorised, stale or incomplete object; §9 invariants 2 and 4). It
    fails with the input's own reason, the input named in the detail."""
    for input_id, source in _candidate_inputs(cand, by_id):
        if not source.gate_results:
            if gate == HardGate.STRUCTURAL_INTEGRITY:
                return _fail(ExclusionReason.HARD_GATE_REJECTED, f"input {input_id!r} names this item among its own inputs: no input is judged first")
            continue
        ex = source.exclusion
        if ex is not None and ex.stage == "hard_gates" and ex.hard_gate == gate:
            return _fail(
                ex.reason,
                f"input {input_id!r} was excluded at {gate.value} ({ex.reason.value}: {ex.detail}); an item derived from it cannot enter",
                ex.refresh_condition,
            )
    return PASS


def exclude_derived_of_rejected(asm: Assembly) -> None:
    """After re-injection's own clauses (stage `hard_gates`, no single gate): a derived item whose
    input they excluded is excluded with the input's reason."""
    by_id = candidate_index(asm)
    for cand in inputs_first(asm, by_id):
        if not cand.alive:
            continue
        for input_id, source in _candidate_inputs(cand, by_id):
            ex = source.exclusion
            if ex is not None and ex.stage == "hard_gates":
                cand.exclude(
                    Exclusion(ex.reason, f"input {input_id!r} was excluded ({ex.reason.value}: {ex.detail}); an item derived from it cannot enter", "hard_gates", ex.hard_gate)
                )
                break


def admitted_input_trusts(asm: Assembly, cand: Candidate) -> list[Trust | None]:
    """The trust of each input a derived item names: an input among the candidates counts only if it
    passed the hard gates (with its resolved trust); an input outside the request counts with the
    ceiling of the source type its lineage node declares (None when nothing declares one)."""
    by_id = asm.by_id()
    declared = {node.node_id: node.type for node in cand.item.source_lineage}
    out: list[Trust | None] = []
    for i in cand.item.input_item_ids or ():
        source = by_id.get(i)
        if source is not None and source is not cand:
            if source.exclusion is None or source.exclusion.stage != "hard_gates":
                out.append(source.trust)
            continue
        out.append(trust_ceiling(asm, declared[i]) if i in declared else None)
    return out


def apply_hard_gates(asm: Assembly) -> None:
    order = [(gate, gate.value, GATES[gate]) for gate in asm.policy.admission.hard_filters]
    by_id = candidate_index(asm)
    for cand in inputs_first(asm, by_id):
        results: dict[str, GateResult] = {}
        failed = False
        derived = bool(_candidate_inputs(cand, by_id))
        for gate, name, check in order:
            if failed:
                results[name] = GateResult.NOT_EVALUATED
                continue
            outcome = check(asm, cand)
            if outcome.passed and derived:
                outcome = inherited(cand, gate, by_id)
            results[name] = GateResult.PASSED if outcome.passed else GateResult.FAILED
            if not outcome.passed:
                failed = True
                assert outcome.reason is not None
                cand.exclude(
                    Exclusion(outcome.reason, outcome.detail, "hard_gates", gate, outcome.refresh_condition, event=outcome.event)
                )
                if outcome.event is not None and is_pinned(asm, cand):
                    asm.block(
                        BlockedReason.REQUIRED_PARTITION_MISSING,
                        [cand.item_id],
                        f"resident part {cand.item_id} was hit by lifecycle event {outcome.event}",
                    )
        cand.gate_results = results
        if cand.producer_check is None:
            cand.producer_check = ProducerCheck.NOT_EVALUATED
        if failed and not cand.security_assessment:
            cand.security_assessment = {"status": f"not_evaluated_after_{cand.exclusion.hard_gate.value}_failure"}  # type: ignore[union-attr]
