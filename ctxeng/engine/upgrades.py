"""Evidence-driven policy upgrades (seed §8): a new mechanism enters a policy only with the record
of the failure it solves.

Contract: a policy's *mechanisms* are its values of the clauses that add ways of loading or
changing context — loading more, earlier, longer or from more sources. They are listed once, in
`REGISTRY` below: each entry names its clause (the policy field path, `budget.partitions.*.eviction`
for a clause under a map), how its mechanisms are read from a policy, when a revision *adds* one
(`when`), and what it means. `NOT_MECHANISMS` names every other field of the policy format with the
reason it loads nothing (tests/engine/test_upgrade_registry.py walks the policy model and fails on a
field in neither). Validation (`missing_records`: the service's publish and
`python -m ctxeng validate-policy NEW --previous OLD`), the policy editor's upgrade panel
(`registry_rows`) and docs/conformance.md (a test keeps its table equal to `registry_rows`) read
this one list.

A mechanism has a path (`transforms.allowed.decision_compress`, `budget.partitions.evidence.eviction`)
and a value. A revision adds it over the revision it replaces when the entry's `when` says so: a
path the other has not (`each value`), one whose value differs (`value differs`: an eviction rule, a
relevance floor), or one whose number is higher than the one it replaces (`raised`: a source limit's ceiling). Each added mechanism
needs an entry of the new revision's `upgrades` naming its path (`UpgradeRecord`: the assemblies
whose confirmed failures it addresses, the failure, the new failure modes it brings, its running
cost and when to revoke it). `missing_records` says which are missing, one `path: message` line per
mechanism, at the clause's own field path (`transforms.allowed[2]: ...`). Removing a mechanism needs
no record.

`ContextPolicy` refuses an entry whose `mechanism` is not one of the policy's own mechanisms (a
typo, or a record left behind when its mechanism was revoked). An entry names the failure it
answers as manifests record it (`shows`, read by `failure_lines`): the service accepts only
addresses whose manifests show it. Its `revoke_when` is evaluated from manifests
(`revocation_status`) and shown met / not met. Pure: the impact preview judges an addressed
assembly with `failure_gone` (below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy_models import ContextPolicy

# (mechanism path, the field path where the policy states it, its value as text)
Stated = tuple[str, str, str]


def _text(value: object) -> str:
    return str(getattr(value, "value", value))


def _clause(policy: ContextPolicy, path: str) -> object:
    value: object = policy
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _each_value(path: str, skip: tuple[str, ...] = ()) -> Callable[[ContextPolicy], Iterator[Stated]]:
    """A list clause: each value is a mechanism, `<clause>.<value>`, stated at `<clause>[i]`."""
    def read(policy: ContextPolicy) -> Iterator[Stated]:
        for i, value in enumerate(_clause(policy, path)):  # type: ignore[call-overload]
            if _text(value) not in skip:
                yield f"{path}.{_text(value)}", f"{path}[{i}]", _text(value)
    return read


def _partition_evictions(policy: ContextPolicy) -> Iterator[Stated]:
    for name, part in policy.budget.partitions.items():
        path = f"budget.partitions.{name}.eviction"
        yield path, path, _text(part.eviction)


# An excerpt mode's ceiling when `max_tokens` is not stated: source_limits.DEFAULT_EXCERPT_TOKENS (a test
# keeps them equal; this module reads the policy format only).
DEFAULT_CEILING = 1000
_EXCERPT_MODES = ("excerpt_with_line_range", "relevant_sections_plus_hash")


def _source_limit_ceilings(policy: ContextPolicy) -> Iterator[Stated]:
    """Each excerpt mode's effective ceiling: a source without a limit, or reduced by failures, has none."""
    for source_type, limit in policy.source_limits.items():
        if _text(limit.default) in _EXCERPT_MODES:
            path = f"source_limits.{source_type}.max_tokens"
            yield path, path, str(limit.max_tokens if limit.max_tokens is not None else DEFAULT_CEILING)


def _whole_sources(policy: ContextPolicy) -> Iterator[Stated]:
    for source_type, limit in policy.source_limits.items():
        if _text(limit.default) == "whole":
            path = f"source_limits.{source_type}.default"
            yield path, path, "whole"


def _relevance_floor(policy: ContextPolicy) -> Iterator[Stated]:
    if policy.admission.min_relevance > 0:
        yield "admission.min_relevance", "admission.min_relevance", repr(float(policy.admission.min_relevance))


def _prompt_cache_key(policy: ContextPolicy) -> Iterator[Stated]:
    if policy.cache.prompt_cache_key:
        yield "cache.prompt_cache_key", "cache.prompt_cache_key", "true"


# Other agents' deliverables: without a trust default they are untrusted data; a default gives them
# standing in the working set (seed §8: "sub-agent" isolation is an upgrade, not a default).
SUB_AGENT_SOURCE_TYPES = ("agent_output",)


def _sub_agent_standing(policy: ContextPolicy) -> Iterator[Stated]:
    for source_type in SUB_AGENT_SOURCE_TYPES:
        trust = policy.trust.default_by_source.get(source_type)
        if trust is not None:
            path = f"trust.default_by_source.{source_type}"
            yield path, path, _text(trust)


def _new(before: str | None, after: str) -> bool:
    return before is None


def _differs(before: str | None, after: str) -> bool:
    return before != after


def _raised(before: str | None, after: str) -> bool:
    # No ceiling before (no limit for the source) loaded at least as much: a new ceiling narrows.
    return before is not None and float(after) > float(before)


_WHEN = {_new: "each value", _differs: "value differs", _raised: "raised"}


@dataclass(frozen=True)
class Mechanism:
    """One clause of seed §8's mechanisms: where it is, how it is read, when it is added, what it does."""

    clause: str  # the policy field path, `*` for a key of a map: `budget.partitions.*.eviction`
    read: Callable[[ContextPolicy], Iterator[Stated]]
    added: Callable[[str | None, str], bool]
    meaning: str

    @property
    def when(self) -> str:
        return _WHEN[self.added]


REGISTRY: tuple[Mechanism, ...] = (
    Mechanism("transforms.allowed", _each_value("transforms.allowed", skip=("none",)), _new,
              "a way of changing context: summaries, compaction, truncation, elision (`none` adds nothing)"),
    Mechanism("retrieval.default_sources", _each_value("retrieval.default_sources"), _new,
              "a source loaded at every stage (retrieval)"),
    Mechanism("retrieval.diagnostic_sources", _each_value("retrieval.diagnostic_sources"), _new,
              "a source loaded as diagnostics (traces)"),
    Mechanism("retrieval.diagnostic_stages", _each_value("retrieval.diagnostic_stages"), _new,
              "a stage at which diagnostic sources (traces) are loaded without being asked for by id"),
    Mechanism("retrieval.governed_candidate_sources", _each_value("retrieval.governed_candidate_sources"), _new,
              "a governed candidate source (memory)"),
    Mechanism("disclosure.indexes", _each_value("disclosure.indexes"), _new,
              "an index disclosed to the model for progressive loading"),
    Mechanism("cache.stable_prefix_sources", _each_value("cache.stable_prefix_sources"), _new,
              "a source kept in the cached stable prefix"),
    Mechanism("cache.prompt_cache_key", _prompt_cache_key, _differs,
              "a provider cache keyed by the stable prefix (when on)"),
    Mechanism("admission.ranking", _each_value("admission.ranking"), _new,
              "a rerank factor"),
    Mechanism("admission.min_relevance", _relevance_floor, _differs,
              "a relevance floor (when above 0)"),
    Mechanism("admission.allow_incomplete", _each_value("admission.allow_incomplete"), _new,
              "partial or unknown items loaded as diagnostics instead of refused"),
    Mechanism("resident.include", _each_value("resident.include"), _new,
              "a kind loaded at every step, ahead of ranking"),
    Mechanism("resident.when_present", _each_value("resident.when_present"), _new,
              "a kind loaded ahead of ranking whenever a step carries it"),
    Mechanism("externalization.targets", _each_value("externalization.targets"), _new,
              "a store whose objects are loaded back (re-injected) into context"),
    Mechanism("budget.partitions.*.eviction", _partition_evictions, _differs,
              "a partition's eviction rule (summary replacement, candidate reduction, pair eviction)"),
    Mechanism("source_limits.*.default", _whole_sources, _new,
              "a source under a limit loaded `whole`, never reduced"),
    Mechanism("source_limits.*.max_tokens", _source_limit_ceilings, _raised,
              "an excerpt mode's ceiling (1000 when not stated): a higher one loads longer items whole"),
    Mechanism("trust.default_by_source", _sub_agent_standing, _differs,
              "standing for other agents' output (`agent_output`: sub-agents); other source types: trust, not loading"),
)


def _not(reason: str, *paths: str) -> dict[str, str]:
    return dict.fromkeys(paths, reason)


# Every other field of the policy format, with why it adds no way of loading or changing context.
NOT_MECHANISMS: dict[str, str] = {
    **_not("identity and format of the document", "policy_schema_version", "policy.id", "policy.revision", "policy.digest"),
    **_not("narrows who and what the policy applies to", "scope.task_type", "scope.principal_policy"),
    **_not("which authorities may state a required revision: a check, not a load", "revision_authority.required_revision_sources"),
    **_not("freshness decisions: which reads are refused or refreshed, never a new load",
           "freshness.states", "freshness.refresh_required", "freshness.expired", "freshness.unverifiable"),
    **_not("which acquisition outcomes are recorded", "source_acquisition.outcomes"),
    **_not("checks every item passes; fixed sets a policy may reorder, not shrink",
           "admission.hard_filters", "admission.exclusion_reasons", "security.required_assessments",
           "retrieval.require", "structure.preserve", "serialization.preserve", "reinjection.require"),
    **_not("trust and roles: where an admitted item may stand, never what is loaded",
           "trust.producers", "role_limits", "structure.evidence_use_allowed_for"),
    **_not("security: redacts or refuses, loads nothing",
           "security.external_instruction_text", "security.secret_material", "security.secrets_in_call_arguments",
           "security.cross_scope_data", "security.secret_classes"),
    **_not("how much the progressive-disclosure indexes show, not a new index", "disclosure.mode"),
    **_not("how an unresolved call is answered (a synthetic result or none), not a load", "structure.unresolved_tool_calls"),
    **_not("budget arithmetic: sizes shares of the same window, loads no new source",
           "budget.model_context_limit", "budget.response_reserve.fraction", "budget.response_reserve.min",
           "budget.response_reserve.max", "budget.protocol_overhead.fraction", "budget.protocol_overhead.min",
           "budget.protocol_overhead.max", "budget.safety_margin.fraction", "budget.safety_margin.min",
           "budget.safety_margin.max", "budget.partitions.*.minimum.fraction", "budget.partitions.*.minimum.min",
           "budget.partitions.*.minimum.max", "budget.partitions.*.maximum.fraction", "budget.partitions.*.maximum.min",
           "budget.partitions.*.maximum.max", "budget.partitions.*.kinds", "budget.partitions.*.required",
           "budget.borrowing", "budget.calibration.quantile", "budget.calibration.default_factor",
           "budget.calibration.min_reports"),
    **_not("when the allowed transforms run and what they must keep; the transforms are `transforms.allowed`",
           "transforms.trigger", "transforms.preserve"),
    **_not("the wire format of the same content", "serialization.adapter", "serialization.policy_version"),
    **_not("what identifies and invalidates a cache entry; what it holds is `cache.stable_prefix_sources`",
           "cache.identity", "cache.invalidate_on"),
    **_not("events on which loaded items expire: loads less", "expiry.on"),
    **_not("the §8 records themselves",
           "upgrades[].mechanism", "upgrades[].addresses", "upgrades[].failure", "upgrades[].shows",
           "upgrades[].new_failure_modes", "upgrades[].cost", "upgrades[].revocation",
           "upgrades[].revoke_when.shows", "upgrades[].revoke_when.at_least", "upgrades[].revoke_when.of_last"),
    **_not("what a stage's approval and its requirements are: checks before acting, not loads",
           "stages.*.approved_by.*.source_types", "stages.*.approved_by.*.producers", "stages.*.require",
           "stages.*.not_relevant"),
}


def registry_rows() -> list[dict[str, str]]:
    """The registry as the editor and docs/conformance.md show it: clause, when it is added, meaning."""
    return [{"clause": m.clause, "when": m.when, "meaning": m.meaning} for m in REGISTRY]


def registry_table() -> str:
    """The registry as a markdown table (docs/conformance.md carries it between its
    `mechanisms` markers; a test keeps the two equal)."""
    lines = ["| mechanism clause | a revision adds one when | meaning |", "| --- | --- | --- |"]
    lines += [f"| {r['clause']} | {r['when']} | {r['meaning']} |" for r in registry_rows()]
    return "\n".join(lines)


def mechanisms(policy: ContextPolicy) -> dict[str, tuple[str, str]]:
    """Mechanism path -> (the field path where the policy states it, its value)."""
    return {path: (field, value) for m in REGISTRY for path, field, value in m.read(policy)}


def added_mechanisms(previous: ContextPolicy, new: ContextPolicy) -> dict[str, tuple[str, str]]:
    """The mechanisms of `new` that `previous` lacks, or states otherwise where the entry's `when` says so."""
    out: dict[str, tuple[str, str]] = {}
    for m in REGISTRY:
        before = {path: value for path, _, value in m.read(previous)}
        for path, field, value in m.read(new):
            if m.added(before.get(path), value):
                out[path] = (field, value)
    return out


def missing_records(previous: ContextPolicy, new: ContextPolicy) -> list[str]:
    """One `field path: message` line per mechanism `new` adds over `previous` without an
    `upgrades` entry naming it; empty when every addition is recorded."""
    recorded = {u.mechanism for u in new.upgrades}
    return [
        f"{field}: {value!r} is new since {previous.label}; publishing it needs an upgrades entry naming "
        f"{path!r} (mechanism, addresses, failure, new_failure_modes, cost, revocation; seed §8)"
        for path, (field, value) in added_mechanisms(previous, new).items()
        if path not in recorded
    ]


# --------------------------------------------------------------------------- did the upgrade work?
#
# The impact preview replays each assembly an upgrade addresses under the new revision. A sealed
# manifest records a failure in one of two ways: a blocked assembly failed as a whole (its blocked
# reason); a ready one lost what a transform failed to preserve (each failed preservation
# assertion: an output item and an assertion). The failure is *gone* when a blocked assembly is
# ready on replay, or when the replay checks each of a ready one's failed assertions again, on the
# same output item, and none fails (an item that went out before it was checked solves nothing);
# a ready manifest with no failed assertion has no failure to compare (None).


def recorded_failures(manifest: dict) -> list[str]:
    """The failure a manifest (as JSON) records: its block, else its failed assertions, one line each."""
    assembly = manifest.get("assembly") or {}
    if assembly.get("status") == "blocked":
        return [f"blocked: {assembly.get('blocked_reason')}"]
    return [
        f"{record.get('output_item_id')}: {name} failed"
        for record in manifest.get("transforms") or []
        for name, result in (record.get("preservation_assertions") or {}).items()
        if result == "failed"
    ]


def failure_gone(recorded: dict, replayed: dict) -> bool | None:
    """Whether `recorded`'s failure is gone in `replayed` (None: `recorded` records none)."""
    before = recorded_failures(recorded)
    if not before:
        return None
    if (recorded.get("assembly") or {}).get("status") == "blocked":
        return (replayed.get("assembly") or {}).get("status") != "blocked"
    checked_again = {
        f"{record.get('output_item_id')}: {name} failed": result
        for record in replayed.get("transforms") or []
        for name, result in (record.get("preservation_assertions") or {}).items()
    }
    # An assertion the replay did not check again (its item went out earlier) is not solved.
    return all(checked_again.get(f, "failed") != "failed" for f in before)


# --------------------------------------------------------------------------- evidence and revocation
#
# A record's `shows` names the failure it answers as a manifest records it; each addressed assembly
# must show it (evidence of *that* failure, not any assembly of the tenant). `revoke_when` names a
# failure (usually one of the new failure modes) and how often it may show in the policy's newest
# assemblies before the mechanism is taken back out: evaluated from manifests, shown met / not met.


def failure_lines(manifest: dict) -> list[str]:
    """Every failure a manifest (as JSON) records, one line each: `blocked: <reason>` and, for each
    cause heading a detail line, `blocked: <reason> (<cause>)`; `<item>: <assertion> failed` for each
    failed preservation assertion; `<item>: excluded <reason>` for each excluded item."""
    from .vocabulary import BlockedCause

    assembly = manifest.get("assembly") or {}
    out: list[str] = []
    if assembly.get("status") == "blocked":
        reason = assembly.get("blocked_reason")
        out.append(f"blocked: {reason}")
        causes = {c.value for c in BlockedCause}
        for line in assembly.get("blocked_detail") or []:
            head = str(line).split(":", 1)[0]
            if head in causes and f"blocked: {reason} ({head})" not in out:
                out.append(f"blocked: {reason} ({head})")
    out += recorded_failures({"transforms": manifest.get("transforms") or []})
    out += [f"{e.get('item_id')}: excluded {e.get('reason')}" for e in manifest.get("excluded") or []]
    return out


def shows(manifest: dict, pattern: str) -> bool:
    """Does `manifest` record the failure `pattern` (`*` before the colon: any item)?"""
    lines = failure_lines(manifest)
    if pattern.startswith("*: "):
        return any(line.split(": ", 1)[1] == pattern[3:] for line in lines if not line.startswith("blocked: "))
    return pattern in lines


def revocation_status(condition, manifests: list[dict]) -> dict:
    """`revoke_when` over the policy's newest manifests (newest first; only `of_last` are read):
    `{"met": bool, "showing": n, "read": m, "of_last": k, "at_least": j}`. Not met when fewer than
    `at_least` were read: a condition is never met on no evidence."""
    read = manifests[: condition.of_last]
    showing = sum(1 for m in read if shows(m, condition.shows))
    return {"met": showing >= condition.at_least, "showing": showing, "read": len(read),
            "of_last": condition.of_last, "at_least": condition.at_least}
