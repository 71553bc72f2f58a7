"""`budget.calibration`: a model whose count is an estimate keeps a margin learned from reported
usage; an exact one keeps none. Every expected factor and usable input is worked out here from the
ratios and the policy's numbers, never read from the manifest under test."""

from __future__ import annotations

import json
import math

import pytest

from ctxeng.engine import InvalidInput, estimators
from ctxeng.engine.models import BudgetCalibration, Calibration, ContextAssemblyManifest
from ctxeng.engine.pipeline import assemble
from ctxeng.engine.policy import parse_policy, parse_request, policy_body, policy_digest

EXAMPLE = "docs/examples/research-agent"
CLAUDE = {"provider": "anthropic", "name": "claude-sonnet-4-5"}
# The example's budget: 16000 - 2000 - 500 - 500.
UNCALIBRATED = 13000


def example(model: dict | None = None, calibration: dict | None = None):
    request = json.load(open(f"{EXAMPLE}/request.json"))
    if model:
        request["model"] = {**request["model"], **model}
    policy = parse_policy(open(f"{EXAMPLE}/policy.yaml").read())
    if calibration is not None:
        body = policy_body(policy)
        body["budget"]["calibration"] = calibration
        policy = parse_policy(body)
    return parse_request(request), policy


def run(request, policy, **kw):
    return assemble(request, policy, created_at="2026-01-01T00:00:00Z", **kw)


def test_the_factor_is_the_nearest_rank_quantile_of_the_ratios():
    ratios = [1.30, 1.00, 1.20, 1.10, 1.40]  # sorted: 1.0 1.1 1.2 1.3 1.4
    clause = BudgetCalibration(quantile=0.95, min_reports=5)
    assert estimators.calibrate("m", ratios, clause).factor == 1.4  # rank ceil(4.75) = 5
    assert estimators.calibrate("m", ratios, clause.model_copy(update={"quantile": 0.5})).factor == 1.2  # rank 3
    assert estimators.calibrate("m", ratios, clause.model_copy(update={"quantile": 0.2})).factor == 1.0  # rank 1
    got = estimators.calibrate("m", ratios, clause)
    assert (got.reports_used, got.reports_available, got.basis, got.quantile) == (5, 5, "reported usage", 0.95)


def test_fewer_reports_than_the_minimum_give_the_default_factor():
    got = estimators.calibrate("m", [2.0, 2.0, 2.0], BudgetCalibration(default_factor=1.25, min_reports=4))
    assert (got.factor, got.reports_used, got.reports_available, got.basis) == (1.25, 0, 3, "default factor")


def test_a_factor_never_enlarges_the_budget_and_is_rounded_up():
    assert estimators.calibrate("m", [0.8] * 5, BudgetCalibration()).factor == 1.0
    assert estimators.calibrate("m", [1.123401] * 5, BudgetCalibration()).factor == 1.1235
    # Reports with no usable ratio (estimate 0, or a broken value) are not reports.
    assert estimators.calibrate("m", [math.inf, -1.0, 0.0, 1.1, 1.1], BudgetCalibration(min_reports=3)).basis == "default factor"


def test_claude_without_reports_divides_the_usable_input_by_the_default_factor():
    request, policy = example(CLAUDE)
    m = run(request, policy).manifest
    assert m.assembly.estimate.model_dump() == {"encoding": "cl100k_base", "exact": False, "basis": "no public tokenizer"}
    cal = m.assembly.calibration
    assert (cal.model, cal.factor, cal.basis, cal.reports_used, cal.quantile) == ("claude-sonnet-4-5", 1.15, "default factor", 0, 0.95)
    assert cal.usable_input_uncalibrated == UNCALIBRATED
    assert m.budget.usable_input == math.floor(UNCALIBRATED / 1.15)  # 11304
    assert m.budget.payload_tokens <= m.budget.usable_input


def test_a_calibration_from_reports_is_applied_and_recorded():
    request, policy = example(CLAUDE)
    given = estimators.calibrate("claude-sonnet-4-5", [1.05, 1.1, 1.2, 1.3, 1.6, 1.25], policy.budget.calibration_clause)
    assert given.factor == 1.6  # rank ceil(0.95 * 6) = 6
    m = run(request, policy, calibration=given).manifest
    assert m.budget.usable_input == math.floor(UNCALIBRATED / 1.6)
    assert m.assembly.calibration.model_dump() == {**given.model_dump(), "usable_input_uncalibrated": UNCALIBRATED}


def test_the_policy_clause_sets_the_default_factor():
    request, policy = example(CLAUDE, calibration={"quantile": 0.9, "default_factor": 1.3, "min_reports": 3})
    m = run(request, policy).manifest
    assert (m.assembly.calibration.factor, m.assembly.calibration.quantile) == (1.3, 0.9)
    assert m.budget.usable_input == math.floor(UNCALIBRATED / 1.3)


def test_an_exact_model_gets_factor_1_whatever_is_passed():
    request, policy = example()
    passed = Calibration(model="gpt-4o", factor=2.0, quantile=0.95, reports_used=9, reports_available=9, basis="reported usage")
    m = run(request, policy, calibration=passed).manifest
    assert m.assembly.calibration.factor == 1.0 and m.assembly.calibration.basis == "exact count"
    assert m.budget.usable_input == UNCALIBRATED


@pytest.mark.parametrize("given,message", [
    ({"model": "claude-opus-4", "factor": 1.2, "quantile": 0.95, "basis": "reported usage", "reports_used": 5}, "calibration.model"),
    ({"model": "claude-sonnet-4-5", "factor": 1.2, "quantile": 0.5, "basis": "reported usage", "reports_used": 5}, "calibration.quantile"),
    ({"model": "claude-sonnet-4-5", "factor": 1.2, "quantile": 0.95, "basis": "default factor"}, "calibration.factor"),
    ({"model": "claude-sonnet-4-5", "factor": 1.2, "quantile": 0.95, "basis": "reported usage", "reports_used": 4}, "calibration.reports_used"),
])
def test_a_calibration_the_policy_could_not_have_produced_is_refused(given, message):
    request, policy = example(CLAUDE)
    with pytest.raises(InvalidInput, match=message):
        run(request, policy, calibration=Calibration(**given))


@pytest.mark.parametrize("clause,path", [
    ({"quantile": 0}, "quantile"), ({"quantile": 1.5}, "quantile"),
    ({"default_factor": 0.9}, "default_factor"), ({"min_reports": 0}, "min_reports"), ({"window": 3}, "window"),
])
def test_a_calibration_clause_out_of_range_is_refused_by_path(clause, path):
    with pytest.raises(InvalidInput, match=rf"budget\.calibration\.{path}"):
        example(calibration=clause)


def test_a_policy_without_the_clause_keeps_its_body_and_digest():
    _, policy = example()
    assert "calibration" not in policy_body(policy)["budget"]
    _, explicit = example(calibration={})
    assert policy_body(explicit)["budget"]["calibration"] == {"quantile": 0.95, "default_factor": 1.15, "min_reports": 5}
    assert policy_digest(explicit) != policy_digest(policy)  # what is written is what is hashed


def test_a_manifest_sealed_before_the_estimate_was_recorded_still_parses():
    request, policy = example()
    doc = run(request, policy).manifest_dict()
    del doc["assembly"]["estimate"], doc["assembly"]["calibration"]
    old = ContextAssemblyManifest.model_validate(doc)
    assert old.assembly.estimate is None and old.assembly.calibration is None


def test_the_worked_example_counts_under_o200k_and_cl100k():
    """The figures of the closing note: the same example counted with both encodings (gpt-4o is
    o200k now); its decisions are the same under both."""
    from ctxeng.engine.tokens import TiktokenTokenizer

    request, policy = example()
    o200k = run(request, policy).manifest
    cl100k = run(request, policy, tokenizer=TiktokenTokenizer(), calibration=None).manifest
    decisions = lambda m: ([i.item_id for i in m.included], sorted((e.item_id, e.reason) for e in m.excluded))  # noqa: E731
    assert decisions(o200k) == decisions(cl100k)
    assert o200k.assembly.estimator == "tiktoken/o200k_base" and cl100k.assembly.estimator == "tiktoken/cl100k_base"
    # What both encoders counted on this example (3070 and 3049 with the JSON fence headers before issue 37).
    assert (o200k.budget.payload_tokens, cl100k.budget.payload_tokens) == (1319, 1313)


@pytest.mark.parametrize(("factor", "reference", "step", "bounded"), [
    (1.99, 1.15, 0.1, 1.265),  # up: at most reference * (1 + step), rounded down
    (1.2, 1.15, 0.1, 1.2),  # within the step: as it is
    (1.0, 2.0, 0.1, 1.8182),  # down: at most reference / (1 + step), rounded up
    (3.9, 3.8, 0.1, 3.9),
    (4.0, 3.8, 0.1, 4.0),  # never past 4
    (1.0, 1.05, 0.1, 1.0),  # never below 1
    (1.5, 1.3, 0.0, 1.3),  # a step of 0 holds the factor
])
def test_a_factor_from_reports_is_held_within_the_step_of_its_reference(factor, reference, step, bounded):
    calibration = Calibration(model="m", factor=factor, quantile=0.95, reports_used=20, reports_available=20,
                              basis="reported usage")
    result = estimators.bounded_calibration(calibration, reference=reference, step=step)
    assert result.factor == bounded
    assert result.model_dump(exclude={"factor"}) == calibration.model_dump(exclude={"factor"})


def test_a_default_or_exact_factor_is_not_bounded():
    for basis, factor in (("default factor", 1.15), ("exact count", 1.0)):
        calibration = Calibration(model="m", factor=factor, basis=basis)
        assert estimators.bounded_calibration(calibration, reference=3.0, step=0.1) is calibration
