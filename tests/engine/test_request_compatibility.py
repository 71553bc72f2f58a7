"""What a request asserts that its policy does not allow (pipeline.compatibility_errors): a 400 at
submit time, one `path: message` line per problem, each written out by hand here."""

from __future__ import annotations

from ctxeng.engine import parse_policy, parse_request
from ctxeng.engine.pipeline import compatibility_errors

from .builders import policy, request


def errors(req: dict, pol: dict | None = None) -> list[str]:
    return compatibility_errors(parse_request(req), parse_policy(pol or policy()))


def test_a_request_its_policy_admits_has_no_errors():
    assert errors(request()) == []


def test_the_request_must_name_the_policy_and_revision_it_is_given():
    assert errors(request(policy={"id": "other", "revision": 1})) == [
        "policy.id: request names policy 'other', the policy given is 'test-policy'"
    ]
    assert errors(request(policy={"id": "test-policy", "revision": 2})) == [
        "policy.revision: request names revision 2, the policy given is revision 1"
    ]
    assert errors(request(policy={"id": "test-policy"})) == []  # no revision named: any revision


def test_the_policy_scope_binds_the_principal_and_the_task_type():
    pol = policy(scope={"principal_policy": "agent/v2", "task_type": "research"})
    assert errors(request(task_type="research"), pol) == [
        "principal.id: policy test-policy/1 applies to principal 'agent/v2', not 'agent/v1'"
    ]
    pol = policy(scope={"task_type": "research"})
    assert errors(request(task_type="coding"), pol) == ["task_type: policy test-policy/1 is for task type 'research', not 'coding'"]
    assert errors(request(), pol) == []  # a request that names no task type is not refused for it


def test_the_request_scope_must_be_in_the_principals_tenant_and_project():
    assert errors(request(scope="tenant-x/project-z/task-1")) == [
        "scope: 'tenant-x/project-z/task-1' is outside the principal's tenant and project tenant-x/project-y"
    ]
    assert errors(request(scope="tenant-x")) == []


def test_a_required_revision_only_a_listed_authority_may_assert():
    pol = policy(revision_authority={"required_revision_sources": ["artifact_manifest"]})
    req = request(required_revisions={"pi": 7, "plan-42": {"revision": 5, "source": "artifact_manifest"}})
    assert errors(req, pol) == [
        "required_revisions.pi.source: 'task_spec' is not a revision authority of policy test-policy/1 (revision_authority.required_revision_sources)"
    ]


def test_events_outcomes_diagnostic_ids_and_checkpoints_the_policy_does_not_take_are_refused():
    pol = policy(expiry={"on": ["source_expired"]}, externalization={"targets": ["artifact_store"]})
    req = request(
        lifecycle_events=[{"event": "source_expired", "item_id": "goal"}, {"event": "task_closed", "scope": "tenant-x"}],
        diagnostic_item_ids=["goal", "nope"],
        checkpoint={"goal": "g", "current_stage": "s", "input_item_ids": ["goal"]},
    )
    assert errors(req, pol) == [
        "lifecycle_events[1].event: 'task_closed' is not an event policy test-policy/1 acts on (expiry.on)",
        "diagnostic_item_ids[1]: no candidate 'nope'",
        "checkpoint: policy test-policy/1 does not externalize to checkpoints (externalization.targets)",
    ]

