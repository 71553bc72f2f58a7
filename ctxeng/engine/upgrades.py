"""Evidence-driven policy upgrades (seed §8): a new mechanism enters a policy only with the record
of the failure it solves.

Contract: a policy's *mechanisms* are its values of the clauses that add ways of loading or
changing context — each value of `transforms.allowed` (but `none`), `retrieval.default_sources`,
`retrieval.diagnostic_sources`, `retrieval.governed_candidate_sources`, `disclosure.indexes`,
`cache.stable_prefix_sources`, named `<clause>.<value>` (`transforms.allowed.decision_compress`),
and each partition's eviction rule, named `budget.partitions.<name>.eviction`.

A revision *adds* a mechanism relative to the revision it replaces when it has a mechanism path the
other has not, or a partition whose eviction rule differs. Each added mechanism needs an entry of
the new revision's `upgrades` naming its path (`UpgradeRecord`: the assemblies whose confirmed
failures it addresses, the failure, the new failure modes it brings, its running cost and when to
revoke it). `missing_records` says which are missing, one `path: message` line per mechanism, at
the clause's own field path (`transforms.allowed[2]: ...`). Removing a mechanism needs no record.

`ContextPolicy` refuses an entry whose `mechanism` is not one of the policy's own mechanisms (a
typo, or a record left behind when its mechanism was revoked). Pure: the service's publish, the
policy editor and `python -m ctxeng validate-policy NEW --previous OLD` all call `missing_records`;
the impact preview judges an addressed assembly with `failure_gone` (below).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import ContextPolicy

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
    return out


def added_mechanisms(previous: ContextPolicy, new: ContextPolicy) -> dict[str, tuple[str, str]]:
    """The mechanisms of `new` that `previous` lacks (or, for an eviction rule, states otherwise)."""
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
