"""Lifetimes act (seed §7, policy `expiry.on`): lifecycle events exclude what they hit, and an event
for a resident part blocks the assembly."""

from __future__ import annotations

import pytest

from ctxeng.engine import InvalidInput, parse_policy

from .builders import SCOPE, excluded_record, item, policy, reasons, request, run


def plan(revision: int) -> dict:
    return item(f"plan-r{revision}", "editable_project_file", f"plan v{revision}", kind="research_plan",
                revision=revision, source_ref={"artifact_id": "plan-42", "revision": revision})


def test_a_source_expired_event_excludes_its_item_as_expired_with_the_event_and_a_refresh_condition():
    r = run(request(extra=[item("ev")], lifecycle_events=[{"event": "source_expired", "item_id": "ev", "detail": "upstream doc withdrawn"}]))
    rec = excluded_record(r, "ev")
    assert rec.reason == "expired" and rec.hard_gate == "freshness"
    assert "lifecycle event source_expired (agent) for ev: upstream doc withdrawn" == rec.detail
    assert rec.refresh_condition == "fetch_authoritative_source_before_admission"
    assert r.manifest.lifecycle_events[0].event == "source_expired"


def test_a_permission_revoked_event_is_permission_denied_at_the_permission_gate():
    r = run(request(extra=[item("ev")], lifecycle_events=[{"event": "permission_revoked", "item_id": "ev"}]))
    rec = excluded_record(r, "ev")
    assert rec.reason == "permission_denied" and rec.hard_gate == "permission"


def test_revision_replaced_hits_only_the_named_revision_of_the_artifact():
    # Revision 4 beside 5 is superseded by it (stale_revision, an earlier gate than the event's), so
    # the event names revision 5: it hits that revision, and revision 4 is excluded for its own reason.
    r = run(request(extra=[plan(4), plan(5)], lifecycle_events=[{"event": "revision_replaced", "artifact_id": "plan-42", "revision": 5}]))
    assert reasons(r) == {"plan-r4": "stale_revision", "plan-r5": "expired"}
    assert excluded_record(r, "plan-r5").refresh_condition == "load_current_revision"
    assert "plan-r5" in excluded_record(r, "plan-r4").detail
    r = run(request(extra=[plan(4)], lifecycle_events=[{"event": "revision_replaced", "artifact_id": "plan-42", "revision": 5}]))
    assert reasons(r) == {}


def test_an_artifact_event_without_a_revision_hits_every_revision():
    for revision in (4, 5):
        r = run(request(extra=[plan(revision)], lifecycle_events=[{"event": "source_expired", "artifact_id": "plan-42"}]))
        assert reasons(r) == {f"plan-r{revision}": "expired"}


def test_a_scope_event_hits_everything_under_that_scope_only():
    r = run(request(extra=[item("task-ev"), item("project-ev", scope="tenant-x/project-y")],
                    lifecycle_events=[{"event": "source_expired", "scope": SCOPE}]))
    assert "project-ev" in r.manifest.included_ids()
    assert reasons(r)["task-ev"] == "expired"


def test_closing_the_task_blocks_the_assembly_because_its_resident_parts_expire():
    r = run(request(lifecycle_events=[{"event": "task_closed", "scope": SCOPE, "emitted_by": "service"}]))
    m = r.manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing"
    assert any("lifecycle event task_closed" in d for d in m.assembly.blocked_detail)
    assert r.serialized_input is None


def test_an_event_for_a_resident_part_blocks_even_when_another_item_of_its_kind_remains():
    spare = item("goal-2", "user_request", "Same goal, restated.", kind="goal")
    r = run(request(extra=[spare], lifecycle_events=[{"event": "source_expired", "item_id": "goal"}]))
    assert r.manifest.assembly.status == "blocked"
    assert "goal" in r.manifest.assembly.missing


def test_an_event_for_an_ordinary_item_does_not_block():
    r = run(request(extra=[item("ev")], lifecycle_events=[{"event": "source_expired", "item_id": "ev"}]))
    assert r.manifest.assembly.status == "ready"


def test_an_event_the_policy_does_not_act_on_is_refused_by_path():
    pol = policy(expiry={"on": ["source_expired"]})
    with pytest.raises(InvalidInput) as exc:
        run(request(lifecycle_events=[{"event": "task_closed", "scope": SCOPE}]), pol)
    assert exc.value.errors[0].startswith("lifecycle_events[0].event: 'task_closed' is not an event policy test-policy/1 acts on")


def test_a_policy_naming_an_event_the_engine_does_not_act_on_is_invalid_by_path():
    with pytest.raises(InvalidInput) as exc:
        parse_policy(policy(expiry={"on": ["sunset"]}))
    assert exc.value.errors[0].startswith("expiry.on[0]: unknown value 'sunset'")


def test_an_event_names_exactly_one_target():
    with pytest.raises(InvalidInput) as exc:
        run(request(lifecycle_events=[{"event": "source_expired", "item_id": "ev", "scope": SCOPE}]))
    assert exc.value.errors[0].startswith("lifecycle_events[0].item_id: give exactly one of item_id, scope or artifact_id")


def test_events_are_part_of_the_candidate_set_digest():
    a = run(request(extra=[item("ev")]))
    b = run(request(extra=[item("ev")], lifecycle_events=[{"event": "source_expired", "item_id": "ev"}]))
    assert a.manifest.assembly.candidate_set_digest != b.manifest.assembly.candidate_set_digest
