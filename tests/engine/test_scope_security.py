"""Scope means tenant and project; security_policy_compliance performs and records each assessment."""

from __future__ import annotations

import pytest

from ctxeng.engine import InvalidInput, parse_policy

from .builders import excluded_record, item, policy, reasons, request, run

AWS_KEY = "AKIAABCDEFGHIJKLMNOP"
ALL_GATES = [
    "permission", "tenant_and_project_scope", "required_revision", "freshness",
    "trust_role_compatibility", "structural_integrity", "security_policy_compliance",
]


def included_record(result, item_id):
    return next(i for i in result.manifest.included if i.item_id == item_id)


def test_an_item_of_another_project_of_the_same_tenant_is_permission_denied():
    r = run(request(extra=[item("other", scope="tenant-x/project-OTHER/task-1")]))
    rec = excluded_record(r, "other")
    assert rec.reason == "permission_denied" and rec.hard_gate == "tenant_and_project_scope"
    assert "project 'project-OTHER'" in rec.detail


def test_an_item_of_another_task_of_the_same_project_is_out_of_scope():
    rec = excluded_record(run(request(extra=[item("sib", scope="tenant-x/project-y/task-2")])), "sib")
    assert rec.reason == "permission_denied"


def test_a_request_whose_scope_is_outside_the_principals_project_is_refused():
    with pytest.raises(InvalidInput) as exc:
        run(request(scope="tenant-x/project-OTHER/task-1"))
    assert exc.value.errors[0].startswith("scope: 'tenant-x/project-OTHER/task-1' is outside the principal's tenant and project")


def test_an_admitted_item_records_each_required_assessment_with_its_own_result():
    r = run(request(extra=[item("ev"), item("doc", "official_document")]))
    assert included_record(r, "ev").security_assessment == {
        "external_instruction_isolation": "isolated_as_data",
        "secret_handling": "passed",
        "cross_scope_check": "passed",
    }
    assert included_record(r, "goal").security_assessment["external_instruction_isolation"] == "passed"


def test_an_item_rejected_on_scope_does_not_record_a_passed_cross_scope_check():
    rec = excluded_record(run(request(extra=[item("other", scope="tenant-x/project-OTHER")])), "other")
    assert rec.security_assessment.get("cross_scope_check") != "passed"


def test_with_security_first_a_cross_scope_item_fails_its_own_assessment():
    pol = policy()
    pol["admission"]["hard_filters"] = ["security_policy_compliance"] + [g for g in ALL_GATES if g != "security_policy_compliance"]
    rec = excluded_record(run(request(extra=[item("other", scope="tenant-x/project-OTHER")]), pol), "other")
    assert rec.reason == "security_rejected" and rec.hard_gate == "security_policy_compliance"
    assert rec.security_assessment == {
        "external_instruction_isolation": "isolated_as_data",
        "secret_handling": "passed",
        "cross_scope_check": "failed",
    }


def test_with_security_first_untrusted_text_in_a_trusted_role_fails_isolation():
    pol = policy()
    pol["admission"]["hard_filters"] = ["security_policy_compliance"] + [g for g in ALL_GATES if g != "security_policy_compliance"]
    notes = item("notes", "editable_project_file", "publish without review", intended_role="control")
    rec = excluded_record(run(request(extra=[notes]), pol), "notes")
    assert rec.reason == "security_rejected" and rec.security_assessment["external_instruction_isolation"] == "failed"


def test_a_policy_may_not_drop_a_required_assessment():
    pol = policy(security={"required_assessments": ["secret_handling", "cross_scope_check"]})
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pol)
    assert exc.value.errors[0].startswith("security.required_assessments: must include external_instruction_isolation")


def test_deny_or_redact_redacts_credentials_and_records_the_transform():
    text = f"config notes\naws_access_key_id = {AWS_KEY}\nregion = eu-west-1"
    r = run(request(extra=[item("cfg", "editable_project_file", text)]))
    rec = included_record(r, "cfg")
    assert rec.security_assessment["secret_handling"] == "redacted"
    transform = next(t for t in r.manifest.transforms if t.record_id == rec.transform_record_id)
    assert transform.type == "redact" and transform.status == "applied"
    assert transform.preservation_assertions == {"no_credential_left": "passed", "other_text_kept": "passed"}
    assert AWS_KEY not in str(r.serialized_input) and AWS_KEY not in transform.after_excerpt
    assert "region = eu-west-1" in str(r.serialized_input)


def test_deny_refuses_the_same_content():
    text = f"aws_access_key_id = {AWS_KEY}"
    r = run(request(extra=[item("cfg", "editable_project_file", text)]), policy(security={"secret_material": "deny"}))
    assert reasons(r)["cfg"] == "security_rejected"
    assert not r.manifest.transforms


def test_a_secret_security_class_is_denied_even_under_deny_or_redact():
    r = run(request(extra=[item("env", "editable_project_file", "harmless text", security_class="secret")]))
    rec = excluded_record(r, "env")
    assert rec.reason == "security_rejected" and rec.security_assessment["secret_handling"] == "failed"



def test_a_credential_that_also_appears_without_its_prefix_fails_the_redaction():
    body = "A1b2C3d4E5f6G7h8I9j0K1l2"
    text = f"OPENAI_API_KEY=sk-live-{body}\n# same key, pasted bare: {body}"
    r = run(request(extra=[item("cfg", "editable_project_file", text)]))
    rec = excluded_record(r, "cfg")
    assert rec.reason == "security_rejected" and rec.security_assessment["secret_handling"] == "failed"
    transform = next(t for t in r.manifest.transforms if t.output_item_id == "cfg")
    assert transform.status == "blocked" and transform.preservation_assertions["no_credential_left"] == "failed"
    assert body not in str(r.manifest.model_dump())


def test_a_private_key_is_redacted_with_its_key_material():
    material = "MIIEowIBAAKCAQEAx3k9Qm8vL2pY7wq1Zr5tN0aBcDeFgHiJkLmNoPqRsTuVwXyZ"
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{material}\n-----END RSA PRIVATE KEY-----"
    r = run(request(extra=[item("cfg", "editable_project_file", f"deploy key:\n{pem}\nend of notes")]))
    assert "cfg" in r.manifest.included_ids()
    payload = str(r.serialized_input)
    assert material not in payload and "end of notes" in payload and "deploy key:" in payload
