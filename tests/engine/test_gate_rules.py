"""The hard gates' rules (gates.py), each on the smallest input that shows it, hand-written oracles.

Scope ancestry, lifecycle events hitting an item, the source_ref each source type needs, the
credential shapes the secret check knows, isolation of text without authority, and which draft a
review decision must approve. The expected verdict is the rule as the gate's docstring states it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ctxeng.engine.gates import _cross_scope_problem, _event_hits, _find_secret, _isolation, _ref_complete
from ctxeng.engine.models import ContextItem
from ctxeng.engine.vocabulary import Trust
from ctxeng.engine.working import Candidate

from .builders import excluded_record, item, request, run, sha

PRINCIPAL = SimpleNamespace(id="agent/v1", tenant="tenant-x", project="project-y")


def scope_asm(request_scope: str = "tenant-x/project-y/task-1") -> SimpleNamespace:
    return SimpleNamespace(request=SimpleNamespace(principal=PRINCIPAL, scope=request_scope))


@pytest.mark.parametrize(
    "scope, ok",
    [
        ("tenant-x/project-y/task-1", True),
        ("tenant-x/project-y", True),  # an ancestor of the request's scope
        ("tenant-x", True),
        ("/tenant-x//project-y/", True),  # empty segments do not count
        ("tenant-x/project-y/task-2", False),  # another task of the same project
        ("tenant-x/project-y/task-1/sub", False),  # below the request's scope
        ("tenant-x/project-z", False),
        ("tenant-z/project-y/task-1", False),
        ("", False),
    ],
)
def test_an_items_scope_must_be_the_requests_or_an_ancestor_within_the_principals_tenant_and_project(scope, ok):
    assert (_cross_scope_problem(scope_asm(), scope) is None) is ok


def cand(**fields) -> Candidate:
    source_type = fields.pop("source_type", "editable_project_file")
    it = ContextItem.model_validate(item("doc", source_type, "text", **fields))
    return Candidate(item=it, order=0, content="text", trust=it.trust)


def event(**fields) -> SimpleNamespace:
    base = {"item_id": None, "scope": None, "artifact_id": None, "revision": None}
    return SimpleNamespace(**{**base, **fields})


ARTIFACT = {"artifact_id": "plan-42", "revision": 5}


@pytest.mark.parametrize(
    "ev, hits",
    [
        (event(item_id="doc"), True),
        (event(item_id="other"), False),
        (event(scope="tenant-x/project-y"), True),  # the item's scope is under it
        (event(scope="tenant-x/project-y/task-1"), True),
        (event(scope="tenant-x/project-y/task-2"), False),
        (event(scope="tenant-x/project-y/task-1/deeper"), False),
        (event(artifact_id="plan-42"), True),  # every revision
        (event(artifact_id="plan-42", revision=5), True),
        (event(artifact_id="plan-42", revision=4), False),
        (event(artifact_id="plan-43"), False),
    ],
)
def test_a_lifecycle_event_hits_an_item_by_id_by_scope_prefix_or_by_artifact_and_revision(ev, hits):
    assert _event_hits(ev, cand(source_ref=ARTIFACT)) is hits


def test_an_artifact_event_does_not_hit_an_item_that_names_no_artifact():
    assert _event_hits(event(artifact_id="plan-42"), cand()) is False


@pytest.mark.parametrize(
    "source_type, ref, ok",
    [
        ("repository_source", {"repo": "pi", "commit": "c", "path": "a.ts", "lines": "1-2"}, True),
        ("repository_source", {"repo": "pi", "commit": "c", "path": "a.ts"}, False),
        ("repository_source", {"repo": "pi", "commit": "", "path": "a.ts", "lines": "1-2"}, False),
        ("official_document", {"url": "https://x.example"}, True),
        ("official_document", {"document_id": "d-1"}, True),  # either alternative suffices
        ("official_document", {"title": "t"}, False),
        ("editable_project_file", {"artifact_id": "a"}, False),  # an artifact needs its revision
        ("editable_project_file", {"artifact_id": "a", "revision": 0}, True),
        ("something_new", {"anything": 1}, True),
        ("something_new", {}, False),
    ],
)
def test_a_source_ref_must_locate_its_item_as_its_source_type_requires(source_type, ref, ok):
    assert _ref_complete(source_type, ref)[0] is ok


def test_an_incomplete_source_ref_says_which_fields_each_alternative_needs():
    assert _ref_complete("official_document", {}) == (False, "source_ref for 'official_document' needs url or document_id")


@pytest.mark.parametrize(
    "text, secret",
    [
        ("key sk-" + "a1" * 10 + " end", "sk-" + "a1" * 10),
        ("sk-proj-" + "B" * 24, "sk-proj-" + "B" * 24),
        ("sk-" + "a" * 19, None),  # too short to be a key
        ("id AKIA" + "ABCDEFGHIJKLMNOP" + " x", "AKIAABCDEFGHIJKLMNOP"),
        ("AKIA" + "abcdefghijklmnop", None),  # lower case is not an access key id
        ("ghp_" + "x" * 36, "ghp_" + "x" * 36),
        ("ghp_" + "x" * 35, None),
        ("xoxb-1234567890-abc", "xoxb-1234567890-abc"),
        ("xoxq-1234567890", None),
        ("a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nb", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"),
        ("-----BEGIN PRIVATE KEY-----\nMIIE truncated", "-----BEGIN PRIVATE KEY-----\nMIIE truncated"),
        ("-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", None),
        ("the task-sk-list and AKIA docs", None),
    ],
)
def test_credential_shapes_are_found_whole_and_look_alikes_are_not(text, secret):
    m = _find_secret(text)
    assert (m.group(0) if m else None) == secret


@pytest.mark.parametrize(
    "trust, role, result",
    [
        (Trust.TRUSTED_STATE, "state", "passed"),
        (Trust.TASK_AUTHORITY, "task_intent", "passed"),
        (Trust.REPOSITORY_EVIDENCE, "untrusted_data", "isolated_as_data"),
        (Trust.DERIVED_CONTEXT, "derived_context", "isolated_as_data"),
        (Trust.GOVERNED_MEMORY_CANDIDATE, "state", "fenced_as_state"),
        (Trust.GOVERNED_MEMORY_CANDIDATE, "task_intent", "failed"),
        (Trust.EXTERNAL_EVIDENCE, "control", "failed"),
    ],
)
def test_text_without_authority_is_isolated_as_data_or_fenced_as_state_never_instructing(trust, role, result):
    c = cand(intended_role=role)
    c.trust = trust
    assert _isolation(c) == result


DRAFT = "Draft text."


def draft(revision: int, content: str = DRAFT) -> dict:
    return item(f"draft-{revision}", "editable_project_file", content, kind="article_draft", revision=revision,
                source_ref={"artifact_id": "draft-42", "revision": revision})


def review(revision: int, content_hash: str | None = None) -> dict:
    ref = {"artifact_id": "review-42", "revision": 1, "draft_revision": revision, "draft_content_hash": content_hash or sha(DRAFT)}
    return item("review", "editable_project_file", "approved", kind="review_decision", revision=1, source_ref=ref)


def test_the_runtimes_draft_revision_decides_even_when_a_newer_draft_is_among_the_candidates():
    r = run(request(extra=[draft(3), draft(4, "Draft four."), review(3)], runtime_state={"article_draft_revision": 3}))
    assert "review" in r.manifest.included_ids()
    r = run(request(extra=[draft(3), draft(4, "Draft four."), review(4, sha("Draft four."))], runtime_state={"article_draft_revision": 3}))
    assert excluded_record(r, "review").reason == "stale_revision"


def test_without_the_runtimes_word_the_newest_draft_candidate_decides():
    r = run(request(extra=[draft(9), draft(10, "Draft ten."), review(10, sha("Draft ten."))]))
    assert "review" in r.manifest.included_ids()  # 10 is newer than 9 as a number
    r = run(request(extra=[draft(9), draft(10, "Draft ten."), review(9)]))
    rec = excluded_record(r, "review")
    assert rec.reason == "stale_revision" and rec.refresh_condition == "review_article_draft_revision_10"


def test_a_review_approving_the_right_revision_but_other_content_is_stale():
    r = run(request(extra=[draft(3), review(3, sha("some other text"))]))
    rec = excluded_record(r, "review")
    assert rec.reason == "stale_revision" and rec.refresh_condition == "review_article_draft_revision_3"
