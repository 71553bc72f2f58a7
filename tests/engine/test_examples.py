"""The worked examples (shared/examples/research-agent) through the engine: the golden files."""

from __future__ import annotations

import json

import pytest

from ctxeng.engine import assemble, parse_policy, parse_request
from tests.golden import check_expected, delivered_blocks, load_example, system_text

CREATED_AT = "2026-09-06T10:00:00Z"


def _run(request_name: str):
    policy = parse_policy(load_example("policy.yaml"))
    request = parse_request(load_example(request_name))
    return assemble(request, policy, created_at=CREATED_AT)


@pytest.fixture(scope="module")
def ready():
    return _run("request.json")


@pytest.fixture(scope="module")
def blocked():
    return _run("request-blocked.json")


def test_the_worked_example_reaches_every_expected_decision(ready):
    check_expected(ready.manifest_dict(), ready.serialized_input, load_example("expected.json"))


def test_the_blocked_example_reaches_every_expected_decision(blocked):
    check_expected(blocked.manifest_dict(), blocked.serialized_input, load_example("expected-blocked.json"))


def test_the_golden_check_survives_a_json_round_trip_of_manifest_and_input(ready):
    manifest = json.loads(json.dumps(ready.manifest_dict()))
    payload = json.loads(json.dumps(ready.serialized_input))
    check_expected(manifest, payload, load_example("expected.json"))


def test_the_golden_check_rejects_a_manifest_that_reaches_another_decision(ready):
    manifest = ready.manifest_dict()
    for record in manifest["excluded"]:
        if record["item_id"] == "evidence-tampered":
            record["reason"] = "ranking_lost"
    with pytest.raises(AssertionError, match="evidence-tampered"):
        check_expected(manifest, ready.serialized_input, load_example("expected.json"))


def test_the_golden_check_refuses_expected_keys_it_does_not_know(ready):
    with pytest.raises(AssertionError, match="does not know"):
        check_expected(ready.manifest_dict(), ready.serialized_input, {"status": "ready", "new_rule": 1})


def test_the_system_message_is_exactly_the_system_policy_and_the_data_notice(ready):
    request = load_example("request.json")
    policy_text = next(c["content"] for c in request["candidates"] if c["item_id"] == "policy-system")
    system = system_text(ready.serialized_input)
    assert system.startswith(policy_text)
    for cand in request["candidates"]:
        if cand["item_id"] != "policy-system":
            assert cand["content"][:60] not in system, cand["item_id"]


def test_the_test_log_is_delivered_as_its_three_failures_and_the_artifact_ref(ready):
    request = load_example("request.json")
    log = next(c["content"] for c in request["candidates"] if c["item_id"] == "result-call-c")
    failures = [ln for ln in log.splitlines() if "FAILED" in ln]
    body = delivered_blocks(ready.serialized_input, ready.manifest_dict())["result-call-c"]
    assert len(log.splitlines()) >= 3000
    assert [ln for ln in body.splitlines() if "FAILED" in ln] == failures
    assert "testlog-77" in body


def test_the_blocked_example_still_records_every_stage_and_no_input(blocked):
    manifest = blocked.manifest
    assert blocked.serialized_input is None and blocked.assembly_input is None
    assert [s.stage for s in manifest.stages][-1] == "seal"
    assert manifest.assembly.blocked_detail
    assert len(manifest.candidate_items) == len(load_example("request-blocked.json")["candidates"])


def test_the_example_the_tests_read_is_the_contract_the_repository_records():
    """The vendored copy is byte for byte what SHA256SUMS records, and so are the shared examples
    when the tests read those (a clone beside ../shared); a drift on either side fails here."""
    from tests.golden import VENDORED, digests_of, examples_dir, recorded_digests

    recorded = recorded_digests()
    assert set(recorded) == {"policy.yaml", "request.json", "request-blocked.json", "expected.json", "expected-blocked.json"}
    assert digests_of(VENDORED / "research-agent", recorded) == recorded
    assert digests_of(examples_dir() / "research-agent", recorded) == recorded
