"""Evidence-driven upgrades (seed §8, ctxeng.engine.upgrades): which changes of a policy add a
mechanism, and when an addressed failure is gone. Each case changes one clause of the worked
example's policy by hand; the expected field paths are written out, not read from the code."""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine import parse_policy
from ctxeng.engine.errors import load_yaml_text
from ctxeng.engine.upgrades import failure_gone, missing_records
from tests.golden import examples_dir


@pytest.fixture(scope="module")
def body() -> dict:
    return load_yaml_text((examples_dir() / "research-agent" / "policy.yaml").read_text(), what="policy")


def record(mechanism: str) -> dict:
    return {"mechanism": mechanism, "addresses": ["assembly-1"], "failure": "f", "new_failure_modes": "n", "cost": "c", "revocation": "r"}


# (how the clause changes, the field path the missing record is reported at, the mechanism path)
ADDITIONS = [
    (lambda b: b["transforms"]["allowed"].remove("excerpt"), None, None),  # removal: no record
    (lambda b: b["retrieval"].__setitem__("diagnostic_sources", []) or b["retrieval"]["default_sources"].append("trace"),
     "retrieval.default_sources[3]", "retrieval.default_sources.trace"),
    (lambda b: b["disclosure"]["indexes"].append("claim_index"), "disclosure.indexes[3]", "disclosure.indexes.claim_index"),
    (lambda b: b["cache"]["stable_prefix_sources"].append("user_request"), "cache.stable_prefix_sources[1]", "cache.stable_prefix_sources.user_request"),
    (lambda b: b["budget"]["partitions"]["background"].__setitem__("eviction", "reduce_candidates"),
     "budget.partitions.background.eviction", "budget.partitions.background.eviction"),
]


@pytest.mark.parametrize("change, field, mechanism", ADDITIONS)
def test_each_mechanism_clause_added_needs_a_record_and_a_removal_needs_none(body, change, field, mechanism):
    old = parse_policy(body)
    new_body = copy.deepcopy(body)
    change(new_body)
    missing = missing_records(old, parse_policy(new_body))
    if field is None:
        assert missing == []
        return
    (line,) = missing
    assert line.startswith(f"{field}: ") and repr(mechanism) in line
    new_body["upgrades"] = [record(mechanism)]
    assert missing_records(old, parse_policy(new_body)) == []


def test_adding_none_to_transforms_allowed_adds_no_mechanism(body):
    old_body = copy.deepcopy(body)
    old_body["transforms"]["allowed"].remove("none")
    assert missing_records(parse_policy(old_body), parse_policy(body)) == []


def manifest(status: str, failed: dict[str, list[str]] | None = None, passed: dict[str, list[str]] | None = None) -> dict:
    transforms = [{"output_item_id": i, "preservation_assertions": {n: "failed" for n in names}} for i, names in (failed or {}).items()]
    transforms += [{"output_item_id": i, "preservation_assertions": {n: "passed" for n in names}} for i, names in (passed or {}).items()]
    return {"assembly": {"status": status, "blocked_reason": "required_partition_missing" if status == "blocked" else None}, "transforms": transforms}


@pytest.mark.parametrize(
    "recorded, replayed, gone",
    [
        (manifest("blocked"), manifest("ready"), True),
        (manifest("blocked"), manifest("blocked"), False),
        (manifest("ready", failed={"sum": ["goal"]}), manifest("ready", passed={"sum": ["goal"]}), True),
        (manifest("ready", failed={"sum": ["goal"]}), manifest("ready", failed={"sum": ["goal"]}), False),
        (manifest("ready", failed={"sum": ["goal"]}), manifest("ready"), False),  # not checked again: not solved
        (manifest("ready"), manifest("blocked"), None),  # nothing recorded to compare
    ],
)
def test_a_failure_is_gone_when_the_block_is_lifted_or_the_failed_assertion_passes_when_checked_again(recorded, replayed, gone):
    assert failure_gone(recorded, replayed) is gone
