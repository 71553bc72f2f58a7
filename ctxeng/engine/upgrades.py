"""Evidence-driven policy upgrades (seed §8): a new mechanism enters a policy only with the record
of the failure it solves.

Contract: a policy's *mechanisms* are its values of the clauses that add ways of loading or
changing context — every mechanism seed §8 names: each value of `transforms.allowed` (but `none`:
summaries, compaction, truncation), `retrieval.default_sources`, `retrieval.diagnostic_sources`
(traces), `retrieval.governed_candidate_sources` (memory), `disclosure.indexes`,
`cache.stable_prefix_sources`, `admission.ranking` (rerank factors), named `<clause>.<value>`
(`transforms.allowed.decision_compress`); each partition's eviction rule,
`budget.partitions.<name>.eviction`; a relevance floor, `admission.min_relevance` (when above 0);
`cache.prompt_cache_key` (when on); and a trust default giving other agents' output standing,
`trust.default_by_source.agent_output` (sub-agent sources).

A revision *adds* a mechanism relative to the revision it replaces when it has a mechanism path the
other has not, or one whose value differs (an eviction rule, a relevance floor). Each added mechanism needs an entry of
the new revision's `upgrades` naming its path (`UpgradeRecord`: the assemblies whose confirmed
failures it addresses, the failure, the new failure modes it brings, its running cost and when to
revoke it). `missing_records` says which are missing, one `path: message` line per mechanism, at
the clause's own field path (`transforms.allowed[2]: ...`). Removing a mechanism needs no record.

`ContextPolicy` refuses an entry whose `mechanism` is not one of the policy's own mechanisms (a
typo, or a record left behind when its mechanism was revoked). An entry names the failure it
answers as manifests record it (`shows`, read by `failure_lines`): the service accepts only
addresses whose manifests show it. Its `revoke_when` is evaluated from manifests
(`revocation_status`) and shown met / not met. Pure: the service's publish, the
policy editor and `python -m ctxeng validate-policy NEW --previous OLD` all call `missing_records`;
the impact preview judges an addressed assembly with `failure_gone` (below).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy_models import ContextPolicy

_LIST_CLAUSES = (
    ("transforms", "allowed"),
    ("retrieval", "default_sources"),
    ("retrieval", "diagnostic_sources"),
    ("retrieval", "governed_candidate_sources"),
    ("disclosure", "indexes"),
    ("cache", "stable_prefix_sources"),
)


def _text(value: object) -> str:
    return str(getattr(value, "value", value))


def mechanisms(policy: ContextPolicy) -> dict[str, tuple[str, str]]:
    """Mechanism path -> (the field path where the policy states it, its value)."""
    out: dict[str, tuple[str, str]] = {}
    for section, clause in _LIST_CLAUSES:
        for i, value in enumerate(getattr(getattr(policy, section), clause)):
            if (section, clause) == ("transforms", "allowed") and _text(value) == "none":
                continue  # "no transform" adds no way of changing context
            out[f"{section}.{clause}.{_text(value)}"] = (f"{section}.{clause}[{i}]", _text(value))
    for name, part in policy.budget.partitions.items():
        path = f"budget.partitions.{name}.eviction"
        out[path] = (path, _text(part.eviction))
    # Rerank and relevance floors, caches keyed by prefix, sub-agent sources with standing: each
    # is a mechanism of seed §8 like the clauses above.
    for i, factor in enumerate(policy.admission.ranking):
        out[f"admission.ranking.{_text(factor)}"] = (f"admission.ranking[{i}]", _text(factor))
    if policy.admission.min_relevance > 0:
        out["admission.min_relevance"] = ("admission.min_relevance", repr(float(policy.admission.min_relevance)))
    if policy.cache.prompt_cache_key:
        out["cache.prompt_cache_key"] = ("cache.prompt_cache_key", "true")
    for source_type in SUB_AGENT_SOURCE_TYPES:
        trust = policy.trust.default_by_source.get(source_type)
        if trust is not None:
            out[f"trust.default_by_source.{source_type}"] = (f"trust.default_by_source.{source_type}", _text(trust))
    return out


# Other agents' deliverables: without a trust default they are untrusted data; a default gives them
# standing in the working set (seed §8: "sub-agent" isolation is an upgrade, not a default).
SUB_AGENT_SOURCE_TYPES = ("agent_output",)


def added_mechanisms(previous: ContextPolicy, new: ContextPolicy) -> dict[str, tuple[str, str]]:
    """The mechanisms of `new` that `previous` lacks (or, for an eviction rule or a relevance floor,
    states otherwise)."""
    before = mechanisms(previous)
    return {path: (field, value) for path, (field, value) in mechanisms(new).items() if before.get(path, (None, None))[1] != value}


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
