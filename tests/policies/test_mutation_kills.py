"""Cases written for mutants of policies/services.py that survived `make mutate-sample`
(docs/mutation.md, "Over the whole product"): importing a policy file again (identical, changed
draft, bytes, with a note), the revision a draft's new body must keep, the name a refusal gives
the policy, and canceling one impact preview among several.

Oracles: the worked example's policy text (manifests/examples), edited here by hand; rows read back.
"""

from __future__ import annotations

import pytest

from ctxeng.accounts.models import Tenant
from ctxeng.engine.errors import InvalidInput
from policies.models import ImpactPreview, PolicyRevision, PreviewStatus, RevisionStatus
from policies.services import (
    impact_preview_cancel,
    policy_import,
    policy_parse,
    policy_revision_update,
)
from tests.service_fixtures import TENANT

pytestmark = pytest.mark.django_db


def _tenant():
    return Tenant.objects.get(slug=TENANT)


def _changed(text: str) -> str:
    assert "task_type: multi_repository_source_research" in text
    return text.replace("task_type: multi_repository_source_research", "task_type: other_research")


def test_importing_the_same_published_file_again_reuses_its_revision(editor_user, example_policy_text):
    first = policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=True)
    again = policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=True)
    assert again.pk == first.pk
    assert PolicyRevision.objects.count() == 1
    assert again.status == RevisionStatus.PUBLISHED


def test_importing_a_changed_body_of_a_draft_replaces_the_drafts_body_and_text(editor_user, example_policy_text):
    draft = policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=False)
    changed = _changed(example_policy_text)
    updated = policy_import(tenant=_tenant(), text=changed, user=editor_user, publish=False)
    updated.refresh_from_db()
    assert updated.pk == draft.pk
    assert updated.body["scope"]["task_type"] == "other_research"
    assert updated.digest != draft.digest
    assert updated.source_text == changed


def test_importing_a_changed_body_of_a_published_revision_is_refused(editor_user, example_policy_text):
    from ctxeng.server.errors import Conflict

    policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=True)
    with pytest.raises(Conflict, match="bump policy.revision"):
        policy_import(tenant=_tenant(), text=_changed(example_policy_text), user=editor_user, publish=True)


def test_a_file_imported_as_bytes_keeps_its_text(editor_user, example_policy_text):
    revision = policy_import(tenant=_tenant(), text=example_policy_text.encode(), user=editor_user, publish=False)
    revision.refresh_from_db()
    assert revision.source_text == example_policy_text


def test_publishing_on_import_keeps_the_note(editor_user, example_policy_text):
    revision = policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=True,
                             note="from the release pipeline")
    revision.refresh_from_db()
    assert revision.publish_note == "from the release pipeline"


def test_a_drafts_new_body_must_keep_the_drafts_revision_number(editor_user, example_policy_text):
    draft = policy_import(tenant=_tenant(), text=example_policy_text, user=editor_user, publish=False)
    renumbered = example_policy_text.replace("  revision: 3\n", "  revision: 4\n")
    assert renumbered != example_policy_text
    with pytest.raises(InvalidInput, match="body.policy.revision"):
        policy_revision_update(revision=draft, body=renumbered, user=editor_user)


def test_an_empty_policy_text_is_refused_as_an_invalid_policy():
    with pytest.raises(InvalidInput) as refused:
        policy_parse("# comments only\n")
    assert str(refused.value) == "invalid policy: body: the policy is empty"


def test_canceling_one_running_preview_leaves_the_others_running(published_policy):
    running = [ImpactPreview.objects.create(revision=published_policy, digest=published_policy.digest,
                                            status=PreviewStatus.RUNNING) for _ in range(2)]
    impact_preview_cancel(preview=running[0])
    assert [ImpactPreview.objects.get(pk=p.pk).cancel_requested for p in running] == [True, False]


def test_canceling_a_queued_preview_ends_it_now(published_policy):
    queued = ImpactPreview.objects.create(revision=published_policy, digest=published_policy.digest)
    canceled = impact_preview_cancel(preview=queued)
    assert canceled.status == PreviewStatus.CANCELED
    assert canceled.finished_at is not None


def test_a_policy_body_naming_another_policy_or_revision_or_too_large_is_refused_as_a_policy(settings,
                                                                                          example_policy_text):
    with pytest.raises(InvalidInput) as refused:
        policy_parse(example_policy_text, policy_id="another-policy")
    assert str(refused.value).startswith("invalid policy: body.policy.id: 'source-research' does not match")
    with pytest.raises(InvalidInput) as refused:
        policy_parse(example_policy_text, revision=9)
    assert str(refused.value).startswith("invalid policy: body.policy.revision: 3 does not match")
    settings.CTXENG_MAX_REQUEST_BYTES = 100
    with pytest.raises(InvalidInput) as refused:
        policy_parse(example_policy_text)
    assert str(refused.value).startswith("invalid policy: body: ")
    assert "more than the limit of 100 bytes" in str(refused.value)


def test_a_policy_that_is_not_an_object_is_refused_naming_the_body():
    # Written for a survivor of the fresh sample of seed 425378 (docs/mutation.md).
    from ctxeng.engine import InvalidInput
    from policies.services import policy_parse

    for body in (None, ["a", "list"], 7):
        with pytest.raises(InvalidInput) as refused:
            policy_parse(body)
        assert refused.value.errors == ["body: field required (a ContextPolicy object)"]


def test_a_preview_that_fails_on_its_thread_is_logged_with_its_id_and_the_error(transactional_db, caplog):
    # Written for a survivor of seed 349366 (docs/mutation.md): the thread's exception would be
    # lost in its future; the log is the only place an operator sees which preview failed.
    import logging

    from policies.services import _run_inline

    with caplog.at_level(logging.ERROR, logger="policies.services"):
        _run_inline("not-a-preview-id")
    [record] = [r for r in caplog.records if r.name == "policies.services"]
    assert record.getMessage() == "impact preview not-a-preview-id failed in process"
    assert record.exc_info is not None and record.levelno == logging.ERROR


def test_a_stored_selection_fills_every_field_of_the_next_previews_form():
    # Written for a survivor of seed 349366 (docs/mutation.md): the next preview starts from the last.
    from policies.dashboard_selectors import selection_form

    assert selection_form({"runs": ["run-a", "run-b"], "since": "2026-11-01", "until": "2026-12-01", "limit": 20}) == {
        "runs": "run-a, run-b", "since": "2026-11-01", "until": "2026-12-01", "limit": "20"}
    assert selection_form(None) == selection_form({}) == {"runs": "", "since": "", "until": "", "limit": ""}
