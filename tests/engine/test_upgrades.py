"""Evidence-driven upgrades (seed §8, ctxeng.engine.upgrades): which changes of a policy add a
mechanism, and when an addressed failure is gone. Each case changes one clause of the worked
example's policy by hand; the expected field paths are written out, not read from the code."""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine import parse_policy
from ctxeng.engine.errors import load_yaml_text
from ctxeng.engine.upgrades import failure_gone, failure_lines, missing_records, revocation_status, shows
from tests.golden import examples_dir


@pytest.fixture(scope="module")
def body() -> dict:
    return load_yaml_text((examples_dir() / "research-agent" / "policy.yaml").read_text(), what="policy")


def record(mechanism: str) -> dict:
    return {"mechanism": mechanism, "addresses": ["assembly-1"], "failure": "f", "shows": "blocked: required_partition_missing",
            "new_failure_modes": "n", "cost": "c", "revocation": "r",
            "revoke_when": {"shows": "*: excluded ranking_lost", "at_least": 2, "of_last": 5}}


# (how the clause changes, the field path the missing record is reported at, the mechanism path)
ADDITIONS = [
    (lambda b: b["transforms"]["allowed"].remove("excerpt"), None, None),  # removal: no record
    (lambda b: b["retrieval"].__setitem__("diagnostic_sources", []) or b["retrieval"]["default_sources"].append("trace"),
     "retrieval.default_sources[3]", "retrieval.default_sources.trace"),
    (lambda b: b["disclosure"]["indexes"].append("claim_index"), "disclosure.indexes[3]", "disclosure.indexes.claim_index"),
    (lambda b: b["cache"]["stable_prefix_sources"].append("user_request"), "cache.stable_prefix_sources[1]", "cache.stable_prefix_sources.user_request"),
    (lambda b: b["budget"]["partitions"]["background"].__setitem__("eviction", "reduce_candidates"),
     "budget.partitions.background.eviction", "budget.partitions.background.eviction"),
    # Seed §8 names rerank / relevance floors, caches and sub-agent sources as mechanisms too.
    (lambda b: b["admission"].__setitem__("min_relevance", 0.4), "admission.min_relevance", "admission.min_relevance"),
    (lambda b: b["cache"].__setitem__("prompt_cache_key", True), "cache.prompt_cache_key", "cache.prompt_cache_key"),
    (lambda b: b["trust"]["default_by_source"].__setitem__("agent_output", "derived_context"),
     "trust.default_by_source.agent_output", "trust.default_by_source.agent_output"),
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


def test_raising_a_relevance_floor_needs_a_record_and_removing_it_none(body):
    low, high = copy.deepcopy(body), copy.deepcopy(body)
    low["admission"]["min_relevance"] = 0.3
    high["admission"]["min_relevance"] = 0.6
    (line,) = missing_records(parse_policy(low), parse_policy(high))
    assert line.startswith("admission.min_relevance: ")
    assert missing_records(parse_policy(high), parse_policy(body)) == []  # the floor taken out: 0.0


def test_adding_a_ranking_factor_is_a_rerank_mechanism(body):
    old_body = copy.deepcopy(body)
    old_body["admission"]["ranking"].remove("retrieval_cost")
    (line,) = missing_records(parse_policy(old_body), parse_policy(body))
    assert line.startswith("admission.ranking[3]: 'retrieval_cost' is new")


# A manifest as JSON, by hand: one blocked by a budget, one ready with a lossy summary and evictions.
BLOCKED = {"assembly": {"status": "blocked", "blocked_reason": "required_partition_missing",
                        "blocked_detail": ["budget_exhausted: partition 'control' (eviction never) cannot hold system"]},
           "transforms": [], "excluded": [{"item_id": "system", "reason": "budget_evicted"}]}
READY = {"assembly": {"status": "ready", "blocked_reason": None},
         "transforms": [{"output_item_id": "sum", "preservation_assertions": {"goal": "failed", "open_items": "passed"}}],
         "excluded": [{"item_id": "ev-3", "reason": "ranking_lost"}, {"item_id": "sum", "reason": "transform_blocked"}]}


def test_failure_lines_name_the_block_its_cause_each_failed_assertion_and_each_exclusion():
    assert failure_lines(BLOCKED) == ["blocked: required_partition_missing", "blocked: required_partition_missing (budget_exhausted)",
                                      "system: excluded budget_evicted"]
    assert failure_lines(READY) == ["sum: goal failed", "ev-3: excluded ranking_lost", "sum: excluded transform_blocked"]


@pytest.mark.parametrize(
    "manifest, pattern, expected",
    [
        (BLOCKED, "blocked: required_partition_missing (budget_exhausted)", True),
        (BLOCKED, "blocked: transform_blocked", False),
        (READY, "sum: goal failed", True),
        (READY, "sum: open_items failed", False),  # it passed
        (READY, "*: excluded ranking_lost", True),
        (READY, "*: excluded budget_evicted", False),
        (READY, "blocked: required_partition_missing", False),
    ],
)
def test_a_manifest_shows_a_failure_only_when_it_records_it(manifest, pattern, expected):
    assert shows(manifest, pattern) is expected


def test_a_revocation_condition_is_met_from_the_newest_manifests_only():
    from ctxeng.engine.models import RevocationCondition

    when = RevocationCondition(shows="*: excluded ranking_lost", at_least=2, of_last=3)
    # newest first: READY, READY -> 2 of the 3 newest show it: met
    assert revocation_status(when, [READY, READY, BLOCKED, READY])["met"] is True
    # the two that show it are not both among the 3 newest: not met, and the count says so
    status = revocation_status(when, [READY, BLOCKED, BLOCKED, READY])
    assert (status["met"], status["showing"], status["read"]) == (False, 1, 3)
    assert revocation_status(when, [])["met"] is False  # never met on no evidence


@pytest.mark.parametrize(
    "revoke_when, shows_line, path",
    [
        ({"shows": "*: excluded ranking_lost", "at_least": 4, "of_last": 3}, "blocked: transform_blocked", "upgrades[0].revoke_when"),
        ({"shows": "things went badly", "at_least": 1, "of_last": 3}, "blocked: transform_blocked", "upgrades[0].revoke_when.shows"),
        ({"shows": "*: excluded ranking_lost", "at_least": 1, "of_last": 3}, "blocked: budget_exhausted", "upgrades[0].shows"),
    ],
)
def test_a_record_names_its_failure_and_revocation_in_the_manifests_own_terms(body, revoke_when, shows_line, path):
    from ctxeng.engine import InvalidInput

    new_body = copy.deepcopy(body)
    new_body["disclosure"]["indexes"].append("claim_index")
    new_body["upgrades"] = [{**record("disclosure.indexes.claim_index"), "shows": shows_line, "revoke_when": revoke_when}]
    with pytest.raises(InvalidInput) as err:
        parse_policy(new_body)
    assert path in str(err.value)
