"""The cache status and the cache-eligible figure of a remote job compare with the run's previous
step as the service sealed it (issue 51, N10), never with the `previous_cache` the agent sends:
an agent that sent back its own step's payload hashes made that step 100% cache-eligible.

The oracles are written from the requests: two requests that differ only in their step id
serialize to the same payload (compared here, byte for byte), so every unit of the second is
eligible; a request for another model differs in the first unit (the model and the tools), so
none is. The served manifest says where the figure came from (`previous_cache_from`)."""

from __future__ import annotations

import copy
import json

import pytest

from ctxeng.engine import assemble, parse_policy, parse_request
from tests.service_fixtures import OTHER_TENANT, TENANT


@pytest.fixture(autouse=True)
def policy(published_policy):
    return published_policy


@pytest.fixture
def both_tenants(published_policy, outsider_user, example_policy_text):
    """The example policy published in the other tenant too (its own `outsider_user`)."""
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    policy_import(tenant=Tenant.objects.get(slug=OTHER_TENANT), text=example_policy_text, user=outsider_user,
                  publish=True)


def step(example_request, *, run_id: str, step_id: str, tenant: str = TENANT, **extra) -> dict:
    body = json.loads(json.dumps(example_request).replace(TENANT, tenant))
    return {**body, "run_id": run_id, "step_id": step_id, **extra}


def sealed(submit, client, body: dict) -> tuple[dict, dict | None]:
    """Submit `body`, run its job; (the served manifest, the served model input)."""
    answer = submit(client, body)
    assert answer.status_code == 202, answer.content
    job = client.get(f"/api/v1/assemblies/{answer.json()['id']}/").json()
    assert job["status"] == "ready", job
    manifest = client.get(f"/api/v1/assemblies/{job['id']}/manifest/").json()
    payload = client.get(f"/api/v1/assemblies/{job['id']}/input/")
    return manifest, (payload.json() if payload.status_code == 200 else None)


def own_hashes(body: dict, example_policy_text: str) -> list[str]:
    """The step's own payload prefix hashes, as an agent gets them by assembling it locally."""
    return assemble(parse_request(body), parse_policy(example_policy_text)).manifest.cache.payload_prefix_hashes


def other_model(body: dict) -> dict:
    changed = copy.deepcopy(body)
    changed["model"]["name"] = "gpt-4o-mini"
    return changed


def test_an_agent_sending_its_own_hashes_as_the_previous_steps_gets_the_services_figure(
        agent_api, submit, example_request, example_policy_text):
    first, _ = sealed(submit, agent_api, step(example_request, run_id="run-n10", step_id="step-1"))
    honest_next = other_model(step(example_request, run_id="run-n10", step_id="step-2"))
    lie = {"prefix_identity": first["cache"]["prefix_identity"], "invalidation_keys": first["cache"]["invalidation_keys"],
           "payload_prefix_hashes": own_hashes(honest_next, example_policy_text)}
    # What the claim would have earned: assembled with it, as the agent's own engine does, all of it.
    claimed = assemble(parse_request({**honest_next, "previous_cache": lie}), parse_policy(example_policy_text))
    assert claimed.manifest.cache.cache_eligible_share == 1.0
    assert claimed.manifest.cache.previous_cache_from == "request"

    second, _ = sealed(submit, agent_api, {**honest_next, "previous_cache": lie})
    cache = second["cache"]
    # Another model: the first unit (model and tools) differs from step 1's, so nothing repeats.
    assert (cache["cache_eligible_basis"], cache["cache_eligible_units"], cache["cache_eligible_tokens"]) == (
        "previous_step", 0, 0)
    assert cache["cache_eligible_share"] == 0 and cache["cache_eligible_ends_at"] == "tools"
    assert cache["previous_cache_from"] == "service"


def test_a_runs_honest_consecutive_steps_get_the_whole_payload_eligible_whatever_the_agent_sends(
        agent_api, submit, example_request):
    first, first_input = sealed(submit, agent_api, step(example_request, run_id="run-honest", step_id="step-1"))
    assert (first["cache"]["cache_eligible_basis"], first["cache"]["previous_cache_from"]) == (
        "no_previous_step", "service")
    second, second_input = sealed(submit, agent_api, step(example_request, run_id="run-honest", step_id="step-2",
                                                          previous_cache=first["cache"]))
    # Requests that differ only in their step id: the same bytes sent, so every unit repeats.
    assert first_input is not None and second_input == first_input
    cache = second["cache"]
    assert cache["cache_eligible_basis"] == "previous_step" and cache["previous_cache_from"] == "service"
    assert cache["cache_eligible_share"] == 1 and cache["cache_eligible_ends_at"] is None
    assert cache["cache_eligible_tokens"] == cache["payload_text_tokens"] > 0
    assert cache["status"] == "hit"  # the same identity and keys as step 1's stored record
    # Sending nothing (or a wrong record) changes nothing: the figure is the service's.
    third, _ = sealed(submit, agent_api, step(example_request, run_id="run-honest", step_id="step-3"))
    assert (third["cache"]["cache_eligible_share"], third["cache"]["status"]) == (1, "hit")


def test_another_tenants_or_another_runs_steps_are_never_the_previous_step(
        agent_api, outsider_api, both_tenants, submit, example_request, example_policy_text):
    """Tenant z has a ready step in a run of the same name, tenant x one in another run: tenant x's
    first step of its run compares with neither, whatever it claims."""
    sealed(submit, outsider_api, step(example_request, run_id="run-shared-name", step_id="step-1",
                                      tenant=OTHER_TENANT))
    sealed(submit, agent_api, step(example_request, run_id="run-other", step_id="step-1"))
    body = step(example_request, run_id="run-shared-name", step_id="step-2")
    lie = {"prefix_identity": None, "payload_prefix_hashes": own_hashes(body, example_policy_text)}
    mine, _ = sealed(submit, agent_api, {**body, "previous_cache": lie})
    cache = mine["cache"]
    assert (cache["cache_eligible_basis"], cache["cache_eligible_units"], cache["previous_cache_from"]) == (
        "no_previous_step", 0, "service")
    assert cache["invalidated_by"] == ["no_previous_step"]


def test_a_blocked_step_is_passed_over_and_the_step_after_it_compares_with_the_last_sent(
        agent_api, submit, example_request, example_blocked_request):
    """A blocked step sent nothing: the provider's cache still holds the step before it."""
    first, _ = sealed(submit, agent_api, step(example_request, run_id="run-b", step_id="step-1"))
    blocked = submit(agent_api, step(example_blocked_request, run_id="run-b", step_id="step-2"))
    assert agent_api.get(f"/api/v1/assemblies/{blocked.json()['id']}/").json()["status"] == "blocked"
    third, _ = sealed(submit, agent_api, step(example_request, run_id="run-b", step_id="step-3"))
    assert (third["cache"]["cache_eligible_basis"], third["cache"]["cache_eligible_share"]) == ("previous_step", 1)


def test_a_step_assembled_after_a_later_one_compares_with_the_one_before_it(
        agent_api, agent_user, submit, example_request):
    """Step 2 waits (its message not yet delivered) while step 3, for another model, is submitted
    and sealed; step 2 then compares with step 1, submitted before it, not with step 3."""
    from manifests.selectors import manifest_document
    from manifests.services import assembly_job_assemble, assembly_job_claim, assembly_job_submit

    sealed(submit, agent_api, step(example_request, run_id="run-order", step_id="step-1"))
    waiting, _ = assembly_job_submit(user=agent_user, data=step(example_request, run_id="run-order",
                                                                step_id="step-2"))  # its enqueue never runs here
    sealed(submit, agent_api, other_model(step(example_request, run_id="run-order", step_id="step-3")))
    assert assembly_job_assemble(job_id=waiting.id, attempt=assembly_job_claim(job_id=waiting.id)) == "ready"
    waiting.refresh_from_db()
    cache = manifest_document(waiting.manifest)["cache"]
    assert (cache["cache_eligible_basis"], cache["cache_eligible_share"]) == ("previous_step", 1)
