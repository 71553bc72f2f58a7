"""The worker calibrates an inexact count from the tenant's own usage reports for that model: the
factor each job's manifest records is the nearest-rank quantile of actual / estimate worked out
here from the reports this test wrote, never read back from a selector."""

from __future__ import annotations

import json
import math

import pytest

from ctxeng.accounts.models import Role, Tenant
from ctxeng.accounts.services import tenant_member_add
from manifests.examples import example_json, example_text
from manifests.models import AssemblyJob, UsageReport
from manifests.selectors import usage_ratios
from manifests.services import (
    assembly_job_assemble,
    assembly_job_claim,
    assembly_job_submit,
    usage_report_record,
)
from policies.services import policy_import

CLAUDE = {"provider": "anthropic", "name": "claude-sonnet-4-5"}
UNCALIBRATED = 16000 - 2000 - 500 - 500  # the worked example's budget


@pytest.fixture
def owners(db):
    users = {}
    for tenant in ("tenant-x", "tenant-o"):
        users[tenant] = tenant_member_add(username=f"owner-{tenant}", tenant_slug=tenant, roles=list(Role.values), password="pw pw pw pw").user
        policy_import(tenant=Tenant.objects.get(slug=tenant), text=example_text("policy.yaml"), user=users[tenant], publish=True, note="example")
    return users


def job(user, key: str, model: dict, tenant: str = "tenant-x") -> AssemblyJob:
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", tenant))
    request["run_id"], request["model"] = f"run-cal-{key}", {**request["model"], **model}
    submitted, _ = assembly_job_submit(user=user, data=request, idempotency_key=f"cal-{key}")
    assembly_job_assemble(job_id=submitted.id, attempt=assembly_job_claim(job_id=submitted.id))
    done = AssemblyJob.objects.get(pk=submitted.pk)
    assert done.status == "ready", (done.error, done.manifest.sections["assembly"]["blocked_detail"] if done.status == "blocked" else None)
    return done


def report(user, done: AssemblyJob, ratio: float) -> float:
    """Report an actual count of `ratio` times the estimate; returns the ratio the row holds."""
    estimate = done.manifest.estimated_input_tokens
    actual = round(estimate * ratio)
    usage_report_record(manifest=done.manifest, user=user, input_tokens=actual, cached_tokens=0, output_tokens=1)
    return actual / estimate


def recorded(done: AssemblyJob) -> tuple[dict, dict]:
    return done.manifest.sections["assembly"]["calibration"], done.manifest.sections["budget"]


def test_a_claude_job_without_reports_uses_the_default_factor(owners):
    cal, budget = recorded(job(owners["tenant-x"], "first", CLAUDE))
    assert (cal["factor"], cal["basis"], cal["reports_available"]) == (1.15, "default factor", 0)
    assert budget["usable_input"] == math.floor(UNCALIBRATED / 1.15)


@pytest.fixture
def no_hourly_bound(settings):
    """The factor as the reports' quantile gives it: a step of 3 lets it reach [1, 4] at once (the
    bound has its own tests below)."""
    settings.CTXENG_CALIBRATION_STEP_PER_HOUR = 3


def test_once_there_are_enough_reports_the_factor_is_their_quantile(owners, no_hourly_bound):
    owner = owners["tenant-x"]
    ratios = [report(owner, job(owner, f"r{i}", CLAUDE), r) for i, r in enumerate([1.02, 1.31, 1.08, 1.17])]
    cal, _ = recorded(job(owner, "four", CLAUDE))
    assert (cal["factor"], cal["basis"], cal["reports_available"]) == (1.15, "default factor", 4)  # min_reports 5
    ratios.append(report(owner, job(owner, "r4", CLAUDE), 1.12))
    ratios.append(report(owner, job(owner, "r5", CLAUDE), 1.24))
    cal, budget = recorded(job(owner, "six", CLAUDE))
    # nearest rank: the ceil(0.95 * 6) = 6th smallest ratio, rounded up to 4 decimals
    want = math.ceil(round(sorted(ratios)[5] * 10_000, 6)) / 10_000
    assert (cal["factor"], cal["basis"], cal["reports_used"], cal["quantile"]) == (want, "reported usage", 6, 0.95)
    assert budget["usable_input"] == math.floor(UNCALIBRATED / want)
    assert cal["usable_input_uncalibrated"] == UNCALIBRATED


def test_an_exact_model_is_never_calibrated_whatever_its_reports_say(owners):
    owner = owners["tenant-x"]
    for i in range(6):
        report(owner, job(owner, f"o{i}", {"provider": "openai", "name": "gpt-4o"}), 1.5)
    cal, budget = recorded(job(owner, "o-next", {"provider": "openai", "name": "gpt-4o"}))
    assert (cal["factor"], cal["basis"]) == (1.0, "exact count")
    assert budget["usable_input"] == UNCALIBRATED


def test_another_tenants_reports_and_another_models_never_count(owners):
    outsider = owners["tenant-o"]
    for i in range(6):
        report(outsider, job(outsider, f"t{i}", CLAUDE, tenant="tenant-o"), 1.3)
    owner = owners["tenant-x"]
    for i in range(6):
        report(owner, job(owner, f"m{i}", {"provider": "anthropic", "name": "claude-opus-4-1"}), 1.35)
    cal, _ = recorded(job(owner, "mine", CLAUDE))
    assert (cal["factor"], cal["reports_available"]) == (1.15, 0)
    tenant_o = Tenant.objects.get(slug="tenant-o")
    assert len(usage_ratios(tenant_id=tenant_o.pk, provider="anthropic", model_name="claude-sonnet-4-5")) == 6


# --------------------------------------------------------------------------- issue 40, finding 3

MAX_INT32 = 2**31 - 1


@pytest.mark.parametrize("reported", [MAX_INT32, 1])
def test_reports_far_from_the_estimate_are_kept_but_never_steer_the_factor(owners, reported):
    """Five reports of 2147483647 input tokens used to raise the factor to 4.0 (the usable input to
    a quarter); five of 1 token dropped it to 1.0 (no margin). Outside 0.5..2 times the estimate a
    report is an outlier: stored, and the next job keeps the default factor."""
    owner = owners["tenant-x"]
    for i in range(5):
        done = job(owner, f"x{i}", CLAUDE)
        usage_report_record(manifest=done.manifest, user=owner, input_tokens=reported, cached_tokens=0, output_tokens=1)
    assert UsageReport.objects.filter(input_tokens=reported).count() == 5
    cal, budget = recorded(job(owner, "after", CLAUDE))
    assert (cal["factor"], cal["basis"], cal["reports_available"]) == (1.15, "default factor", 0)
    assert budget["usable_input"] == math.floor(UNCALIBRATED / 1.15)


def test_the_band_is_inclusive_and_bounds_the_factor(owners, settings, no_hourly_bound):
    """Ratios at the band's edges count; one a token beyond them does not. The factor is then at
    most the band's top whatever is reported (here 2.0, by hand: the 6th of six ratios 2.0)."""
    owner = owners["tenant-x"]
    dones = [job(owner, f"b{i}", CLAUDE) for i in range(8)]
    estimates = [d.manifest.estimated_input_tokens for d in dones]
    actuals = [2 * e for e in estimates[:5]] + [math.ceil(e / 2) for e in estimates[5:6]] + [
        2 * e + 1 for e in estimates[6:7]] + [math.ceil(e / 2) - 1 for e in estimates[7:]]
    for done, actual in zip(dones, actuals, strict=True):
        usage_report_record(manifest=done.manifest, user=owner, input_tokens=actual, cached_tokens=0, output_tokens=1)
    tenant = Tenant.objects.get(slug="tenant-x")
    ratios = usage_ratios(tenant_id=tenant.pk, provider="anthropic", model_name="claude-sonnet-4-5")
    assert len(ratios) == 6
    request = example_json("request.json")
    request["run_id"], request["model"] = "run-cal-bounded", {**request["model"], **CLAUDE}
    submitted, _ = assembly_job_submit(user=owner, data=request, idempotency_key="cal-bounded")
    assembly_job_assemble(job_id=submitted.id, attempt=assembly_job_claim(job_id=submitted.id))
    # A factor of 2 leaves the example's partitions too little: blocked, with the factor recorded.
    cal, budget = recorded(AssemblyJob.objects.get(pk=submitted.pk))
    assert (cal["factor"], cal["reports_used"]) == (2.0, 6)
    assert budget["usable_input"] == math.floor(UNCALIBRATED / 2.0)
    settings.CTXENG_USAGE_RATIO_MAX = 1.5  # the operator narrows the band: the ratios of 2 are outliers now
    assert len(usage_ratios(tenant_id=tenant.pk, provider="anthropic", model_name="claude-sonnet-4-5")) == 1


def test_more_cached_than_input_tokens_is_refused_and_nothing_is_stored(owners):
    from ctxeng.server.errors import BadReference

    owner = owners["tenant-x"]
    done = job(owner, "cached", CLAUDE)
    with pytest.raises(BadReference, match="cached_tokens: 11 is more than input_tokens 10"):
        usage_report_record(manifest=done.manifest, user=owner, input_tokens=10, cached_tokens=11, output_tokens=1)
    assert not UsageReport.objects.exists()
    usage_report_record(manifest=done.manifest, user=owner, input_tokens=10, cached_tokens=10, output_tokens=1)
    assert UsageReport.objects.count() == 1


# --------------------------------------------------------------------------- issue 51, F3: an hourly bound


def test_twenty_reports_at_twice_the_estimate_move_the_factor_by_at_most_the_hourly_step(owners, settings):
    """Twenty reports at 1.99 times their estimate (the quantile: 1.99) used to cut every later run's
    usable input by 42%. Within the hour the factor is the default 1.15 times 1.1 at most: 1.265."""
    assert settings.CTXENG_CALIBRATION_STEP_PER_HOUR == 0.1  # the default
    owner = owners["tenant-x"]
    for i in range(20):
        report(owner, job(owner, f"f3-{i}", CLAUDE), 1.99)
    cal, budget = recorded(job(owner, "f3-after", CLAUDE))
    assert (cal["factor"], cal["basis"], cal["reports_used"]) == (1.265, "reported usage", 20)
    assert budget["usable_input"] == math.floor(UNCALIBRATED / 1.265)


@pytest.fixture
def hour_after(monkeypatch):
    """`hour_after(done)`: the calibration's clock set to an hour after `done`'s manifest was
    sealed (only the reference's "an hour before" reads it; rows keep their real times)."""
    from datetime import timedelta
    from types import SimpleNamespace

    import manifests.selectors

    def set_clock(done: AssemblyJob) -> None:
        later = done.manifest.created_at + timedelta(hours=1)
        monkeypatch.setattr(manifests.selectors, "timezone", SimpleNamespace(now=lambda: later))

    return set_clock


def test_an_hour_later_the_factor_moves_one_more_step_from_the_one_applied_then(owners, hour_after):
    """The reference is the factor the tenant's newest manifest sealed an hour or more before was
    given (1.265 here), not the reports: a flood cannot jump once it is an hour old."""
    owner = owners["tenant-x"]
    for i in range(20):
        report(owner, job(owner, f"h-{i}", CLAUDE), 1.99)
    first = job(owner, "h-first", CLAUDE)
    assert recorded(first)[0]["factor"] == 1.265
    hour_after(first)
    assert recorded(job(owner, "h-second", CLAUDE))[0]["factor"] == 1.3915  # 1.265 * 1.1
    assert recorded(job(owner, "h-third", CLAUDE))[0]["factor"] == 1.3915  # h-second is not an hour old


def test_another_tenants_manifests_are_no_reference(owners, hour_after):
    outsider, owner = owners["tenant-o"], owners["tenant-x"]
    for i in range(6):
        report(outsider, job(outsider, f"o-{i}", CLAUDE, tenant="tenant-o"), 1.9)
    last = job(outsider, "o-last", CLAUDE, tenant="tenant-o")
    assert recorded(last)[0]["factor"] == 1.265
    hour_after(last)
    for i in range(6):
        report(owner, job(owner, f"x-{i}", CLAUDE), 1.9)
    # none of tenant-x's manifests is an hour old: its reference is the policy's default, 1.15
    assert recorded(job(owner, "x-after", CLAUDE))[0]["factor"] == 1.265
