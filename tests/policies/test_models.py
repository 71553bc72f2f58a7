"""Policy revisions at the model layer: published ones are immutable, one is current."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from manifests.models import Immutable
from policies.models import PolicyRevision, RevisionStatus
from policies.services import policy_revision_create, policy_revision_publish


@pytest.fixture
def draft(db, editor_user, example_policy_body):
    from ctxeng.accounts.models import Tenant

    tenant = Tenant.objects.get(slug="tenant-x")
    return policy_revision_create(tenant=tenant, body=example_policy_body, user=editor_user)


def _next_body(body: dict, revision: int) -> dict:
    return {**body, "policy": {**body["policy"], "revision": revision}}


def test_a_draft_stores_the_engine_digest(draft, example_policy_body):
    import json

    from ctxeng.engine import parse_policy, policy_digest

    assert draft.status == RevisionStatus.DRAFT
    # The same policy written another way (JSON text, keys sorted) digests alike; a changed value does not.
    rewritten = json.dumps(example_policy_body, sort_keys=True, indent=1)
    assert draft.digest == policy_digest(parse_policy(rewritten))
    changed = {**example_policy_body, "budget": {**example_policy_body["budget"], "safety_margin": example_policy_body["budget"]["safety_margin"] + 1}}
    assert draft.digest != policy_digest(parse_policy(changed))


def test_a_draft_body_can_change(draft):
    draft.body = {**draft.body, "admission": {**draft.body["admission"], "min_relevance": 0.5}}
    draft.save()
    assert PolicyRevision.objects.get(pk=draft.pk).body["admission"]["min_relevance"] == 0.5


def test_the_model_refuses_to_change_a_published_body(draft, editor_user):
    published = policy_revision_publish(revision=draft, user=editor_user, note="")
    published.body = {**published.body, "admission": {**published.body["admission"], "min_relevance": 0.5}}
    with pytest.raises(Immutable):
        published.save()
    published.refresh_from_db()
    published.digest = "sha256:" + "0" * 64
    with pytest.raises(Immutable):
        published.save()


def test_the_model_refuses_to_unpublish_or_delete_a_published_revision(draft, editor_user):
    published = policy_revision_publish(revision=draft, user=editor_user)
    published.status = RevisionStatus.DRAFT
    with pytest.raises(Immutable):
        published.save()
    published.refresh_from_db()
    with pytest.raises(Immutable):
        published.delete()


def test_publishing_retires_the_previous_revision(draft, editor_user, example_policy_body):
    first = policy_revision_publish(revision=draft, user=editor_user)
    second = policy_revision_create(tenant=first.policy.tenant, body=_next_body(example_policy_body, 4), user=editor_user)
    policy_revision_publish(revision=second, user=editor_user, note="bump")
    statuses = dict(PolicyRevision.objects.values_list("revision", "status"))
    assert statuses == {3: RevisionStatus.RETIRED, 4: RevisionStatus.PUBLISHED}
    assert PolicyRevision.objects.get(revision=3).retired_at is not None


def test_the_database_allows_one_published_revision_per_policy(draft, editor_user, example_policy_body):
    policy_revision_publish(revision=draft, user=editor_user)
    second = policy_revision_create(tenant=draft.policy.tenant, body=_next_body(example_policy_body, 4), user=editor_user)
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyRevision.objects.filter(pk=second.pk).update(status=RevisionStatus.PUBLISHED)
