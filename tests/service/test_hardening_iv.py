"""Hardening IV (issue 40): what the attack on the production layout found in the service, each
refused or bounded with a test that failed before its fix.

3. a usage report with more cached than input tokens is a 400 naming `cached_tokens`; one for a
   blocked assembly a 409; one far from the assembly's estimate is stored and marked as not used
   for calibration (the calibration itself: tests/manifests/test_calibration.py).
"""

from __future__ import annotations

import pytest

URL = "/api/v1/assemblies/"


# --------------------------------------------------------------------------- 3. usage reports


def test_more_cached_than_input_tokens_is_a_400_naming_cached_tokens(published_policy, agent_api, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.post(f"{URL}{job_id}/usage/", {"input_tokens": 100, "cached_tokens": 101}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["cached_tokens: 101 is more than input_tokens 100 (the cached part is "
                                         "counted in the input)"]
    from manifests.models import UsageReport

    assert not UsageReport.objects.exists()


def test_usage_for_a_blocked_assembly_is_a_409_and_nothing_is_stored(
        published_policy, agent_api, submit, example_blocked_request):
    from manifests.models import UsageReport

    job = submit(agent_api, example_blocked_request).json()
    assert agent_api.get(job["url"]).json()["status"] == "blocked"
    response = agent_api.post(f"{URL}{job['id']}/usage/", {"input_tokens": 100}, format="json")
    assert response.status_code == 409 and "no model call was made with it" in response.json()["errors"][0]
    assert not UsageReport.objects.exists()


# (the actual count, from the estimate e; whether it is within 0.5..2 times e, by hand)
BAND_CASES = {"equal": (lambda e: e, True), "half": (lambda e: -(-e // 2), True), "double": (lambda e: 2 * e, True),
              "past double": (lambda e: 2 * e + 1, False), "below half": (lambda e: -(-e // 2) - 1, False),
              "int32 max": (lambda e: 2**31 - 1, False), "one": (lambda e: 1, False)}


@pytest.mark.parametrize("case", BAND_CASES)
def test_the_answer_says_whether_calibration_reads_the_report(published_policy, agent_api, submit, example_request, case):
    from manifests.models import Manifest, UsageReport

    actual, used = BAND_CASES[case]
    job_id = submit(agent_api, example_request).json()["id"]
    estimate = Manifest.objects.get(job_id=job_id).estimated_input_tokens
    response = agent_api.post(f"{URL}{job_id}/usage/", {"input_tokens": actual(estimate)}, format="json")
    assert response.status_code == 200
    assert response.json()["used_for_calibration"] is used
    assert UsageReport.objects.get(manifest__job_id=job_id).input_tokens == actual(estimate)  # stored either way

