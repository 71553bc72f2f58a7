"""Re-injected artifacts pass `reinjection.require` clause by clause, each recorded (seed §7)."""

from __future__ import annotations

from ctxeng.engine import StoredArtifact, assemble, parse_policy, parse_request

from .builders import CREATED_AT, excluded_record, policy, request, sha

PLAN = "Plan v5: cover all five repositories; open items OI-1..OI-3."
SCOPE = "tenant-x/project-y/task-1"


def stored(**fields) -> StoredArtifact:
    base = dict(artifact_id="plan-42", revision=5, kind="research_plan", content=PLAN, content_hash=sha(PLAN),
                writer="artifact-store/v1", scope=SCOPE)
    base.update(fields)
    return StoredArtifact(**base)


def reinjected(**fields) -> dict:
    base = {
        "item_id": "plan",
        "kind": "research_plan",
        "source_type": "editable_project_file",
        "source_ref": {"artifact_id": "plan-42", "revision": 5},
        "producer": "artifact-store/v1",
        "artifact_ref": {"artifact_id": "plan-42", "revision": 5},
        "content_hash": sha(PLAN),
        "revision": 5,
        "scope": SCOPE,
        "intended_role": "untrusted_data",
    }
    base.update(fields)
    return base


def assemble_with(store: dict, item: dict, pol: dict | None = None):
    def lookup(artifact_id, revision):
        return store.get((artifact_id, str(revision)))

    req = parse_request(request(extra=[item]))
    return assemble(req, parse_policy(pol or policy()), created_at=CREATED_AT, artifacts=lookup)


def store_of(*artifacts: StoredArtifact) -> dict:
    return {(a.artifact_id, str(a.revision)): a for a in artifacts}


def test_a_stored_artifact_is_loaded_from_the_store_and_every_clause_recorded():
    r = assemble_with(store_of(stored()), reinjected())
    rec = next(i for i in r.manifest.included if i.item_id == "plan")
    assert rec.reinjection_checks == {clause: "passed" for clause in policy_clauses()}
    assert PLAN in str(r.serialized_input)


def policy_clauses() -> list[str]:
    return [c.value for c in parse_policy(policy()).reinjection.require]


def test_an_artifact_the_store_does_not_hold_fails_object_identity():
    r = assemble_with({}, reinjected())
    rec = excluded_record(r, "plan")
    assert rec.reason == "hard_gate_rejected"
    assert rec.reinjection_checks["object_identity"] == "failed"


def test_a_writer_other_than_the_declared_producer_fails_writer_and_source():
    r = assemble_with(store_of(stored(writer="someone-else")), reinjected())
    rec = excluded_record(r, "plan")
    assert rec.reinjection_checks["writer_and_source"] == "failed"
    assert "re-injection clause writer_and_source failed" in rec.detail


def test_a_stored_kind_other_than_the_items_kind_fails_writer_and_source():
    rec = excluded_record(assemble_with(store_of(stored(kind="review_decision")), reinjected()), "plan")
    assert rec.reinjection_checks["writer_and_source"] == "failed"


def test_a_declared_revision_other_than_the_stored_one_fails_content_hash_and_revision():
    rec = excluded_record(assemble_with(store_of(stored()), reinjected(revision=4)), "plan")
    assert rec.reinjection_checks["content_hash_and_revision"] == "failed"


def test_content_that_changed_in_the_store_fails_integrity_and_the_hash_clause():
    changed = "Plan v5 (edited): skip review."
    rec = excluded_record(assemble_with(store_of(stored(content=changed, content_hash=sha(changed))), reinjected()), "plan")
    assert rec.reason == "hard_gate_rejected" and rec.hard_gate == "structural_integrity"
    assert rec.reinjection_checks["content_hash_and_revision"] == "failed"
    assert rec.reinjection_checks["structural_integrity"] == "failed"


def test_an_artifact_stored_under_another_project_fails_scope_and_permission():
    rec = excluded_record(assemble_with(store_of(stored(scope="tenant-x/project-OTHER")), reinjected()), "plan")
    assert rec.reason == "permission_denied"
    assert rec.reinjection_checks["scope_and_permission"] == "failed"


def test_a_secret_classified_artifact_fails_security_classification():
    rec = excluded_record(assemble_with(store_of(stored()), reinjected(security_class="secret")), "plan")
    assert rec.reinjection_checks["security_classification"] == "failed"
    assert rec.reinjection_checks["security_policy_compliance"] == "failed"


def test_only_the_clauses_the_policy_lists_are_checked():
    pol = policy(reinjection={"require": ["object_identity", "content_hash_and_revision"]})
    r = assemble_with(store_of(stored(writer="someone-else")), reinjected(), pol)
    rec = next(i for i in r.manifest.included if i.item_id == "plan")
    assert rec.reinjection_checks == {"object_identity": "passed", "content_hash_and_revision": "passed"}


def test_without_the_artifact_store_as_a_target_nothing_is_re_injected():
    pol = policy(externalization={"targets": ["file", "checkpoint"]})
    rec = excluded_record(assemble_with(store_of(stored()), reinjected(), pol), "plan")
    assert rec.reason == "hard_gate_rejected" and "externalization.targets" in rec.detail


def test_without_a_store_a_re_injected_item_cannot_be_loaded():
    req = parse_request(request(extra=[reinjected()]))
    r = assemble(req, parse_policy(policy()), created_at=CREATED_AT)
    rec = excluded_record(r, "plan")
    assert "could not be loaded" in rec.detail and rec.reinjection_checks["object_identity"] == "failed"
