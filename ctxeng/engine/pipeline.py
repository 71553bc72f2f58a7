"""The assembly pipeline: the stages of seed §9, called in order, and nothing else.

    acquisition -> hard gates -> ranking -> load modes -> structure -> source limits
    -> summary verification -> budget -> transforms -> seal (-> render -> adapter)

Each stage is a module with its contract in its docstring; this module only orders them and logs
each stage into the manifest's `stages` list, which is how tests pin the seed's invariants
(acquisition before admission, gates before ranking, structure before transforms ...).
Deterministic: the same request, policy revision and adapter version give byte-identical
serialized input and the same hashes (`created_at` is the only clock, and it is hashed nowhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from . import (
    acquisition,
    budget,
    call_secrets,
    checks,
    elision,
    estimators,
    gates,
    loading,
    ranking,
    reinjection,
    seal,
    source_limits,
    structure,
    transforms,
)
from .adapters import ADAPTERS, get_adapter
from .cache import cache_record, provider_cache_options
from .errors import InvalidInput
from .models import (
    REPLY_SIZE_PARAMS,
    AssemblyRequest,
    Calibration,
    CalibrationRecord,
    ContextAssemblyManifest,
    ContextPolicy,
    StoredArtifact,
)
from .policy import policy_digest
from .render import framing_tokens, render
from .tokens import Tokenizer, tokenizer_for
from .vocabulary import BlockedCause, BlockedReason, ExternalizationTarget
from .working import Assembly

# Looks up a stored artifact by (artifact_id, revision); revision None means the newest.
ArtifactStore = Callable[[str, "int | str | None"], "StoredArtifact | None"]


@dataclass(frozen=True)
class AssemblyResult:
    manifest: ContextAssemblyManifest
    serialized_input: dict[str, Any] | None
    assembly_input: dict[str, Any] | None = None
    # (stage, started, ended) by time.perf_counter_ns, in pipeline order: wall-clock timings for
    # tracing (ctxeng.telemetry), kept outside the manifest so the seal stays deterministic.
    stage_timings: tuple[tuple[str, int, int], ...] = field(default=(), compare=False)

    @property
    def status(self) -> str:
        return self.manifest.assembly.status.value

    def manifest_dict(self) -> dict[str, Any]:
        return self.manifest.model_dump(mode="json")


def compatibility_errors(request: AssemblyRequest, policy: ContextPolicy) -> list[str]:
    """Every reason `request` cannot be assembled under `policy`, as `path: message` lines.

    The service calls this at submit time, so a request the policy refuses is a 400 then, never a
    job that fails later for a reason known when it was submitted."""
    errors = []
    if request.policy.id != policy.policy.id:
        errors.append(f"policy.id: request names policy {request.policy.id!r}, the policy given is {policy.policy.id!r}")
    if request.policy.revision is not None and request.policy.revision != policy.policy.revision:
        errors.append(f"policy.revision: request names revision {request.policy.revision}, the policy given is revision {policy.policy.revision}")
    adapter = request.adapter or policy.serialization.adapter
    if get_adapter(adapter) is None:
        errors.append(f"adapter: unknown adapter {adapter!r}; expected one of {', '.join(repr(name) for name in ADAPTERS)}")
    return errors + _clause_errors(request, policy) + _reply_errors(request, policy)


def _reply_errors(request: AssemblyRequest, policy: ContextPolicy) -> list[str]:
    """The caller's reply size must leave room for input at this model's context limit."""
    reply = request.reply_tokens()
    if reply is None:
        return []
    b = budget.resolve(policy, request.model.context_limit).budget
    room = request.model.context_limit - reply - b.protocol_overhead - b.safety_margin  # type: ignore[operator]
    if room > 0:
        return []
    key = next(k for k in REPLY_SIZE_PARAMS if request.params.get(k) == reply)
    return [f"params.{key}: {reply} tokens for the reply leave no room for input at context limit {request.model.context_limit} "
            f"(protocol_overhead {b.protocol_overhead} + safety_margin {b.safety_margin}); lower {key} or use a larger model"]


def _reserve_reply(policy: ContextPolicy, request: AssemblyRequest) -> ContextPolicy:
    """The policy (shares resolved) with `response_reserve` at least the caller's reply size: the
    budget never plans input into tokens the caller asked the model to answer with."""
    reply = request.reply_tokens()
    if reply is None or reply <= policy.budget.response_reserve:  # type: ignore[operator]
        return policy
    return policy.model_copy(update={"budget": policy.budget.model_copy(update={"response_reserve": reply})})


def _check_compatible(request: AssemblyRequest, policy: ContextPolicy) -> str:
    errors = compatibility_errors(request, policy)
    if errors:
        raise InvalidInput(errors, what="request")
    return request.adapter or policy.serialization.adapter


def _clause_errors(request: AssemblyRequest, policy: ContextPolicy) -> list[str]:
    """What the request asserts that the policy does not allow it to assert (a 400, not a decision)."""
    errors = []
    scope = policy.scope
    if scope.principal_policy is not None and request.principal.id != scope.principal_policy:
        errors.append(f"principal.id: policy {policy.label} applies to principal {scope.principal_policy!r}, not {request.principal.id!r}")
    if scope.task_type is not None and request.task_type is not None and request.task_type != scope.task_type:
        errors.append(f"task_type: policy {policy.label} is for task type {scope.task_type!r}, not {request.task_type!r}")
    parts = [p for p in request.scope.split("/") if p]
    if parts[:2] != [request.principal.tenant, request.principal.project][: len(parts[:2])]:
        errors.append(f"scope: {request.scope!r} is outside the principal's tenant and project {request.principal.tenant}/{request.principal.project}")
    authorities = policy.revision_authority.required_revision_sources
    for name, (_, source) in request.required_revision_map().items():
        if source not in authorities:
            errors.append(f"required_revisions.{name}.source: {source.value!r} is not a revision authority of policy {policy.label} (revision_authority.required_revision_sources)")
    for i, rec in enumerate(request.source_acquisition):
        if rec.outcome not in policy.source_acquisition.outcomes:
            errors.append(f"source_acquisition[{i}].outcome: {rec.outcome.value!r} is not an outcome policy {policy.label} records (source_acquisition.outcomes)")
    for i, event in enumerate(request.lifecycle_events):
        if event.event not in policy.expiry.on:
            errors.append(f"lifecycle_events[{i}].event: {event.event.value!r} is not an event policy {policy.label} acts on (expiry.on)")
    ids = {c.item_id for c in request.candidates}
    for i, item_id in enumerate(request.diagnostic_item_ids):
        if item_id not in ids:
            errors.append(f"diagnostic_item_ids[{i}]: no candidate {item_id!r}")
    if request.checkpoint is not None and ExternalizationTarget.CHECKPOINT not in policy.externalization.targets:
        errors.append(f"checkpoint: policy {policy.label} does not externalize to checkpoints (externalization.targets)")
    return errors


def assemble(
    request: AssemblyRequest,
    policy: ContextPolicy,
    *,
    tokenizer: Tokenizer | None = None,
    created_at: str | None = None,
    artifacts: ArtifactStore | None = None,
    calibration: Calibration | None = None,
    previous_cache_from: Literal["request", "service"] = "request",
) -> AssemblyResult:
    """Assemble one step. `artifacts` looks up stored artifacts for re-injected items (`artifact_ref`)
    by (artifact_id, revision); without it such items cannot be loaded and are rejected.
    `tokenizer`: what counts; by default the encoding `estimators` gives the request's model.
    `calibration`: the margin for a model whose count is not exact, from its usage reports
    (`estimators.calibrate`); without it the policy's `budget.calibration.default_factor`.
    `previous_cache_from`: `service` when the caller put its own stored record of the run's
    previous step in `request.previous_cache` (the service's jobs), recorded in the cache record;
    `request` (default) when the record is the requester's claim."""
    adapter = get_adapter(_check_compatible(request, policy))
    assert adapter is not None
    if tokenizer is None:
        estimate = estimators.estimate_for(request.model)
        tok: Tokenizer = tokenizer_for(estimate.encoding)
    else:
        estimate, tok = estimators.estimate_with(request.model, tokenizer), tokenizer
    applied = estimators.applied_calibration(estimate, request.model.name, calibration, policy.budget.calibration_clause)
    digest = policy_digest(policy)  # of the policy as written, shares and all
    # Budget shares become tokens once, at this model's size: every later stage, the manifest's
    # budget record and the adapter's max_tokens (response_reserve) see tokens.
    policy = _reserve_reply(budget.resolve(policy, request.model.context_limit), request)

    asm = Assembly(request=request, policy=policy, policy_digest=digest, tokenizer=tok, nonce="", candidate_set_digest="")
    asm.artifact_store = artifacts
    asm.previous_cache_from = previous_cache_from
    acquisition.inventory(asm)
    asm.candidate_set_digest = acquisition.candidate_set_digest(
        request, [(c.item_id, c.digest) for c in asm.candidates]
    )
    acquisition.measure(asm)
    asm.log("acquisition", len(asm.candidates), f"{len(request.source_acquisition)} source requests recorded")

    n = len(asm.alive())
    gates.apply_hard_gates(asm)
    reinjection.check_reinjected(asm)
    gates.exclude_derived_of_rejected(asm)
    asm.log("hard_gates", n)

    n = len(asm.alive())
    ranking.rank(asm)
    asm.log("ranking", n)

    n = len(asm.alive())
    loading.assign_load_modes(asm)
    reinjection.record_admission_reasons(asm)
    asm.log("load_modes", n)

    n = len(asm.alive())
    structure.place_in_zones(asm)
    structure.pair_tool_calls(asm)
    asm.log("structure", n, f"{len(asm.pairs)} tool calls paired by call_id")

    n = len(asm.alive())
    source_limits.apply_source_limits(asm)
    # Unresolved calls (no result, or a result a gate or source limit excluded) are settled once,
    # here, before budgeting, so a call's synthetic result (or its omission) is what the budget counts.
    structure.resolve_unresolved(asm)
    # A superseded write's long arguments are elided before the budget, which counts the call as sent.
    elision.elide_superseded_writes(asm)
    # A credential in the agent's own call arguments is redacted (or blocks) before the budget counts the call.
    call_secrets.handle_call_secrets(asm)
    asm.log("source_limits", n)

    # Whether a supplied summary may enter at all is an admission question: decided before the
    # budget, so a summary failing its assertions never takes budget another item then lacks.
    n = len(asm.alive())
    transforms.verify_summaries(asm)
    asm.log("summary_verification", n, f"{len(asm.summaries)} supplied summaries checked")

    n = len(asm.alive())
    alloc = budget.allocate(asm, calibration_factor=applied.factor)
    asm.log("budget", n, f"usable {alloc.usable}")

    asm.log("transforms", len(asm.alive()), f"{len(asm.transforms)} transform records")

    seal.check_required(asm)
    included = asm.alive()
    assembly_input = serialized = framing = None
    structure_checks: dict = {}
    serialization_checks: dict = {}
    if asm.blocked_reason is None:
        assembly_input = render(asm, included)
        framing = framing_tokens(asm, assembly_input, included)
        payload = framing + sum(budget.final_usage(asm, included)[0].values())
        if payload > alloc.usable_input:
            # Only when the joined system text tokenizes longer than its reserve; never sent over budget.
            asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, ["budget.framing"], f"payload {payload} tokens exceeds the usable input {alloc.usable_input} (framing {framing}, reserved {alloc.framing_reserved})", BlockedCause.BUDGET_EXHAUSTED)
            assembly_input = None
    if asm.blocked_reason is None:
        reply = request.reply_tokens()
        model = {"name": request.model.name, "max_tokens": reply if reply is not None else policy.budget.response_reserve,
                 "params": dict(request.params), **provider_cache_options(asm, included, adapter.name)}
        serialized = adapter.serialize(assembly_input, model)
        structure_checks = checks.structure_checks(asm, included, assembly_input)
        serialization_checks = checks.serialization_checks(asm, included, serialized)
        broken = checks.failed(structure_checks) + checks.failed(serialization_checks)
        if broken:
            asm.block(BlockedReason.TRANSFORM_BLOCKED, broken, "rendered input breaks preserved properties: " + ", ".join(broken), BlockedCause.STRUCTURE_CHECK_FAILED)
            assembly_input = serialized = None
    asm.log("seal", len(included), "blocked" if asm.blocked_reason else "ready")
    manifest = seal.seal(
        asm,
        adapter=adapter,
        alloc=alloc,
        framing=framing if asm.blocked_reason is None else None,
        created_at=created_at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        assembly_input=assembly_input,
        serialized=serialized,
        cache=cache_record(asm, included, serialized),
        estimator=getattr(tok, "name", type(tok).__name__),
        structure_checks=structure_checks,
        serialization_checks=serialization_checks,
    )
    # How the count was made and the margin it was given: facts of this assembly, beside `estimator`.
    calibrated = CalibrationRecord(**applied.model_dump(), usable_input_uncalibrated=alloc.uncalibrated_input)
    manifest = manifest.model_copy(update={"assembly": manifest.assembly.model_copy(update={"estimate": estimate, "calibration": calibrated})})
    publish = getattr(tok, "publish", None)
    if publish is not None:  # the counts made one at a time, for the agent's next step in another process
        publish()
    return AssemblyResult(
        manifest=manifest, serialized_input=serialized, assembly_input=assembly_input, stage_timings=_timings(asm)
    )


def _timings(asm: Assembly) -> tuple[tuple[str, int, int], ...]:
    starts = [asm.started_ns] + [s.ended_ns for s in asm.stages[:-1]]
    return tuple((s.stage, start, s.ended_ns) for s, start in zip(asm.stages, starts, strict=True))
