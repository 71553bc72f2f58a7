"""Budgets written against the model's context limit: shares (`"12.5%"`, `{fraction, min, max}`)
and `model_context_limit: model`, resolved into tokens at the start of each assembly.

Every expected number below is worked out by hand from the policy and the model size.
"""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine import InvalidInput, assemble, parse_policy, parse_request, policy_digest
from ctxeng.engine.budget import resolve

from .builders import CREATED_AT, item, policy, reasons, request, run, tool_call, tool_result


def relative_policy(**budget) -> dict:
    """The builders' policy with its budget in shares of whatever model it serves."""
    pol = policy()
    pol["budget"].update(
        {
            "model_context_limit": "model",
            "response_reserve": "12.5%",
            "protocol_overhead": "2.5%",
            "safety_margin": "2.5%",
        }
    )
    parts = pol["budget"]["partitions"]
    parts["control"]["minimum"] = "5%"
    parts["state"]["minimum"] = "5%"
    parts["direct_evidence"]["minimum"] = "20%"
    parts["recent_tool_pairs"]["minimum"] = "10%"
    parts["background"]["maximum"] = "10%"
    pol["budget"].update(budget)
    return pol


def model(limit: int, provider: str = "openai") -> dict:
    return {"provider": provider, "name": "gpt-4", "context_limit": limit}  # cl100k, exact: no calibration margin


def errors_of(pol: dict) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pol)
    return exc.value.errors


def words(n: int, seed: str) -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


# --------------------------------------------------------------------------- resolution


def test_a_percentage_is_taken_of_the_models_context_limit():
    budget = parse_policy(relative_policy()).budget
    at_128k = budget.resolved(128_000)
    assert at_128k.model_context_limit == 128_000
    assert at_128k.response_reserve == 16_000  # 12.5% of 128000
    assert at_128k.protocol_overhead == at_128k.safety_margin == 3_200  # 2.5%
    assert at_128k.partitions["direct_evidence"].minimum == 25_600  # 20%
    assert at_128k.partitions["background"].maximum == 12_800  # 10%
    at_16k = budget.resolved(16_000)
    assert at_16k.response_reserve == 2_000
    assert at_16k.partitions["control"].minimum == 800  # 5% of 16000


def test_a_share_rounds_down_to_whole_tokens():
    budget = parse_policy(relative_policy(response_reserve="12.345%")).budget
    assert budget.resolved(1_001).response_reserve == 123  # 123.57... tokens
    assert budget.resolved(999).partitions["control"].minimum == 49  # 49.95 tokens


def test_a_numeric_context_limit_caps_the_models_and_shares_are_of_the_smaller():
    budget = parse_policy(relative_policy(model_context_limit=64_000)).budget
    big = budget.resolved(128_000)
    assert big.model_context_limit == 64_000
    assert big.response_reserve == 8_000  # 12.5% of 64000, not of 128000
    small = budget.resolved(32_000)
    assert small.response_reserve == 4_000  # 12.5% of 32000


def test_a_clamped_share_stays_within_its_bounds():
    budget = parse_policy(relative_policy(response_reserve={"fraction": "10%", "min": 1024, "max": 8192})).budget
    assert budget.resolved(8_000).response_reserve == 1_024  # 800 raised to the floor
    assert budget.resolved(50_000).response_reserve == 5_000  # 10%, inside the bounds
    assert budget.resolved(1_000_000).response_reserve == 8_192  # 100000 held to the ceiling


def test_tokens_and_shares_mix_in_one_budget():
    budget = parse_policy(relative_policy(response_reserve=3000)).budget
    resolved = budget.resolved(40_000)
    assert resolved.response_reserve == 3_000
    assert resolved.safety_margin == 1_000  # 2.5% of 40000


def test_an_absolute_budget_is_used_as_written():
    parsed = parse_policy(policy())
    assert parsed.budget.relative is False
    assert resolve(parsed, 8_000) is parsed
    assert parsed.budget.resolved(128_000) is parsed.budget


def test_the_digest_is_of_the_policy_as_written_at_every_model_size():
    parsed = parse_policy(relative_policy())
    written = policy_digest(parsed)
    for limit in (16_000, 128_000):
        r = assemble(parse_request(request(model=model(limit))), parsed, created_at=CREATED_AT)
        assert r.manifest.assembly.policy.digest == written


# --------------------------------------------------------------------------- assembly


def test_the_manifest_records_the_budget_in_tokens_for_the_model_it_served():
    for limit in (16_000, 128_000):
        b = run(request(model=model(limit)), relative_policy()).manifest.budget
        reserve, overhead = limit // 8, limit * 25 // 1000
        assert (b.model_context_limit, b.response_reserve, b.protocol_overhead, b.safety_margin) == (limit, reserve, overhead, overhead)
        assert b.usable_input == limit - reserve - 2 * overhead
        assert b.partitions["direct_evidence"].minimum == limit // 5
        assert b.partitions["background"].maximum == limit // 10


def test_the_response_reserve_is_the_providers_max_tokens_at_that_size():
    for limit, reserve in ((16_000, 2_000), (200_000, 8_192)):
        pol = relative_policy(response_reserve={"fraction": "12.5%", "min": 1024, "max": 8192})
        r = run(request(model=model(limit, "anthropic"), adapter="anthropic_messages"), pol)
        assert r.serialized_input["max_tokens"] == reserve


def test_one_policy_keeps_more_evidence_for_a_larger_model():
    # 40 evidence items of 400 words (~800 tokens each, ~32000 in all): more than a 16k model's
    # whole input, well inside a 128k model's 20% direct_evidence minimum (25600) plus the free pool.
    evidence = [item(f"ev-{i:02d}", content=words(400, f"e{i}x"), relevance=round(1 - i / 100, 2)) for i in range(40)]
    small = run(request(extra=evidence, model=model(16_000)), relative_policy())
    large = run(request(extra=evidence, model=model(128_000)), relative_policy())
    evicted_small = sorted(k for k, v in reasons(small).items() if v == "budget_evicted")
    assert small.status == large.status == "ready"
    assert evicted_small, "a 16k model cannot hold 32000 tokens of evidence"
    assert not [k for k, v in reasons(large).items() if v == "budget_evicted"]
    # reduce_candidates drops the lowest relevance first: what is evicted is the tail of the ranking.
    assert evicted_small == [f"ev-{i:02d}" for i in range(40 - len(evicted_small), 40)]
    assert small.manifest.budget.partitions["direct_evidence"].minimum == 3_200
    assert large.manifest.budget.partitions["direct_evidence"].minimum == 25_600


def test_a_budget_in_shares_decides_as_its_token_equivalent_at_that_size():
    # At 16000: 12.5% = 2000, 3.125% = 500, 6.25% = 1000, 25% = 4000, 9.375% = 1500: the builders'
    # worked-example-like budget in tokens, written in shares.
    absolute = policy()
    absolute["budget"]["partitions"]["direct_evidence"]["minimum"] = 4000
    shares = copy.deepcopy(absolute)
    shares["budget"].update(model_context_limit="model", response_reserve="12.5%", protocol_overhead="3.125%", safety_margin="3.125%")
    parts = shares["budget"]["partitions"]
    parts["control"]["minimum"] = "3.125%"
    parts["state"]["minimum"] = "3.125%"
    parts["direct_evidence"]["minimum"] = "25%"
    parts["recent_tool_pairs"]["minimum"] = "6.25%"
    parts["background"]["maximum"] = "9.375%"
    extra = [item(f"ev-{i}", content=words(300, f"s{i}y"), relevance=0.9 - i / 50) for i in range(12)]
    extra += [tool_result("r1", "c1", words(200, "r"))]
    req = request(extra=extra, tool_calls=[tool_call("c1", "r1")])
    a, s = run(req, absolute), run(req, shares)
    assert reasons(a) == reasons(s)
    assert [i.item_id for i in a.manifest.included] == [i.item_id for i in s.manifest.included]
    for field in ("model_context_limit", "response_reserve", "protocol_overhead", "safety_margin", "usable_input"):
        assert getattr(a.manifest.budget, field) == getattr(s.manifest.budget, field)
    assert {n: (p.minimum, p.maximum) for n, p in a.manifest.budget.partitions.items()} == {
        n: (p.minimum, p.maximum) for n, p in s.manifest.budget.partitions.items()
    }


# --------------------------------------------------------------------------- too small: blocked


def test_a_model_too_small_for_the_token_parts_is_blocked_not_refused():
    # 12.5% + 2.5% + 2.5% of 1000 leave 825 tokens; a 3000-token control minimum cannot hold.
    pol = relative_policy()
    pol["budget"]["partitions"]["control"]["minimum"] = 3000
    r = run(request(model=model(1_000)), pol)
    assert r.status == "blocked"
    assert r.manifest.assembly.blocked_reason.value == "required_partition_missing"
    assert r.serialized_input is None
    assert r.manifest.budget.usable_input == 1_000 - 125 - 25 - 25


def test_a_model_too_small_to_leave_any_input_is_blocked():
    r = run(request(model=model(2_500)), relative_policy(response_reserve=2000, protocol_overhead=500))
    assert r.status == "blocked"
    assert r.manifest.assembly.blocked_reason.value == "required_partition_missing"
    assert r.manifest.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert r.manifest.assembly.missing[0] == "budget.usable_input"


def test_a_reserve_that_rounds_to_no_tokens_is_blocked():
    pol = relative_policy(response_reserve="1%", protocol_overhead=0, safety_margin=0)
    for part in pol["budget"]["partitions"].values():
        part.pop("minimum", None)
    r = run(request(model=model(99)), pol)  # 1% of 99 is 0.99 tokens: 0
    assert r.status == "blocked"
    assert r.manifest.assembly.blocked_reason.value == "required_partition_missing"
    assert r.manifest.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert r.manifest.assembly.missing[0] == "budget.response_reserve"


def test_a_token_minimum_above_a_share_maximum_blocks_at_that_size():
    pol = relative_policy()
    pol["budget"]["partitions"]["background"]["minimum"] = 1000  # above 10% below 10000 tokens
    assert run(request(model=model(20_000)), pol).status == "ready"
    r = run(request(model=model(8_000)), pol)
    assert r.status == "blocked"
    assert r.manifest.assembly.blocked_reason.value == "required_partition_missing"
    assert r.manifest.assembly.missing[0] == "background"


# --------------------------------------------------------------------------- validation


def test_minimum_shares_beyond_what_the_reserves_leave_are_refused_by_path():
    pol = relative_policy()
    pol["budget"]["partitions"]["history"] = {"minimum": "60%", "eviction": "reduce_candidates", "kinds": ["history"]}
    assert errors_of(pol) == [
        "budget.partitions.history.minimum: the partition minimums take 100% of the context limit, "
        "more than the 82.5% that response_reserve, protocol_overhead and safety_margin leave"
    ]


def test_reserves_that_take_the_whole_window_are_refused():
    assert errors_of(relative_policy(response_reserve="90%", safety_margin="10%")) == [
        "budget.safety_margin: response_reserve, protocol_overhead and safety_margin take 102.5% of the context limit, leaving no usable input"
    ]


@pytest.mark.parametrize("value", ["0%", "100.5%", "101%"])
def test_a_percentage_outside_0_to_100_is_refused(value):
    assert errors_of(relative_policy(protocol_overhead=value)) == [
        f"budget.protocol_overhead: {value!r}: a share of the context limit must be more than 0% and at most 100%"
    ]


@pytest.mark.parametrize("value", ["12.5", "%5", "1/8%", "12.1234567%", " 5%"])
def test_a_malformed_percentage_is_refused(value):
    (error,) = errors_of(relative_policy(safety_margin=value))
    assert error.startswith(f"budget.safety_margin: {value!r} is neither a token count nor a percentage")


def test_a_clamp_whose_floor_is_above_its_ceiling_is_refused():
    assert errors_of(relative_policy(response_reserve={"fraction": "10%", "min": 9000, "max": 8192})) == [
        "budget.response_reserve.min: 9000 exceeds max 8192"
    ]
    assert errors_of(relative_policy(response_reserve={"min": 1})) == ["budget.response_reserve.fraction: field required"]


def test_a_context_limit_is_a_token_count_or_the_word_model():
    assert errors_of(relative_policy(model_context_limit="large")) == [
        "budget.model_context_limit: 'large': expected a token count or 'model' (the request's model.context_limit)"
    ]


def test_a_share_minimum_above_a_share_maximum_is_refused():
    pol = relative_policy()
    pol["budget"]["partitions"]["background"]["minimum"] = "12%"
    assert errors_of(pol) == ["budget.partitions.background: minimum 12% exceeds maximum 10%"]


def test_with_a_numeric_context_limit_shares_are_checked_in_tokens_at_it():
    # At 4000: 12.5% + 2.5% + 2.5% leave 3300; the minimums are 200 + 200 + 800 + 400 + 2000.
    pol = relative_policy(model_context_limit=4000)
    pol["budget"]["partitions"]["control"]["minimum"] = 2000
    assert errors_of(pol) == ["budget.partitions: minimums sum to 3400, more than the usable budget 3300 (at model_context_limit 4000)"]


def test_an_absolute_budget_keeps_its_own_messages():
    pol = policy()
    pol["budget"]["partitions"]["control"]["minimum"] = 20000
    assert errors_of(pol) == ["budget.partitions: minimums sum to 22500, more than the usable budget 13000"]
