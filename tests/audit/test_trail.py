"""The audit trail: every policy revision change and token issue/revoke says who, when and which digest."""

from __future__ import annotations

import copy

import pytest
from django.core.management import CommandError, call_command

from ctxeng.audit.models import AuditAction, AuditEvent
from manifests.models import Immutable

POLICY = "source-research"


def _draft(body: dict, revision: int, *, maximum: int | None = None) -> dict:
    draft = copy.deepcopy(body)
    draft["policy"]["revision"] = revision
    draft["policy"].pop("digest", None)
    if maximum is not None:
        draft["budget"]["partitions"]["background"]["maximum"] = maximum
    return draft


def _events(**filters) -> list[tuple[str, str, int | None]]:
    return [(e.action, e.actor_name, e.revision) for e in AuditEvent.objects.filter(**filters).order_by("id")]


def test_create_edit_publish_and_retire_are_each_recorded_with_the_editor_and_the_digest(
    published_policy, editor_api, editor_user, example_policy_body
):
    url = f"/api/v1/policies/{POLICY}/revisions/"
    created = editor_api.post(url, {"body": _draft(example_policy_body, 4)}, format="json")
    assert created.status_code == 201, created.json()
    edited = editor_api.put(f"{url}4/", {"body": _draft(example_policy_body, 4, maximum=1000)}, format="json")
    assert edited.status_code == 200, edited.json()
    published = editor_api.post(f"{url}4/publish/", {"note": "smaller background"}, format="json")
    assert published.status_code == 200, published.json()

    events = AuditEvent.objects.filter(policy=published_policy.policy).order_by("id")
    assert [(e.action, e.revision) for e in events] == [
        ("revision_created", 3), ("revision_published", 3),  # the fixture's import
        ("revision_created", 4), ("revision_edited", 4), ("revision_retired", 3), ("revision_published", 4),
    ]
    assert {e.actor_name for e in events} == {"editor"}
    assert all(e.actor == editor_user and e.tenant.slug == "tenant-x" and e.created_at for e in events)
    by_action = {e.action: e for e in events.filter(revision=4)}
    assert by_action["revision_created"].digest == created.json()["digest"]
    assert by_action["revision_edited"].digest == edited.json()["digest"] != created.json()["digest"]
    assert by_action["revision_edited"].note == f"digest was {created.json()['digest']}"
    assert by_action["revision_published"].digest == edited.json()["digest"]
    assert by_action["revision_published"].note == "smaller background"
    assert events.get(action="revision_retired").digest == published_policy.digest


def test_a_refused_change_records_nothing(published_policy, editor_api, example_policy_body):
    before = AuditEvent.objects.count()
    response = editor_api.put(f"/api/v1/policies/{POLICY}/revisions/3/",
                              {"body": _draft(example_policy_body, 3, maximum=1000)}, format="json")
    assert response.status_code == 409
    assert AuditEvent.objects.count() == before


def test_issue_token_and_revoke_token_are_recorded_for_the_owners_tenants(db, capsys):
    call_command("issue_token", "bot", "--tenant", "tenant-x", "--role", "agent")
    key = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("issue_token", "bot", "--tenant", "tenant-x", "--role", "reviewer")  # same token: no event
    call_command("revoke_token", "bot")

    events = list(AuditEvent.objects.filter(subject="bot").order_by("id"))
    assert [e.action for e in events] == ["token_issued", "token_revoked"]
    assert all(e.tenant.slug == "tenant-x" and e.actor_name.startswith("cli") for e in events)
    assert events[0].digest == events[1].digest and events[0].digest.startswith("sha256:")
    assert key not in events[0].digest  # a fingerprint, never the key


def test_a_revoked_token_gets_401_and_a_new_one_works(published_policy, agent_user, api):
    from rest_framework.authtoken.models import Token

    client = api(agent_user)
    assert client.get("/api/v1/assemblies/").status_code == 200
    call_command("revoke_token", "agent")
    response = client.get("/api/v1/assemblies/")
    assert response.status_code == 401
    [error] = response.json()["errors"]
    assert error.startswith("Invalid token. ") and "manage.py issue_token USERNAME --tenant TENANT --role agent" in error
    assert not Token.objects.filter(user=agent_user).exists()
    assert api(agent_user).get("/api/v1/assemblies/").status_code == 200


def test_a_token_can_be_revoked_by_its_key(agent_user, api, capsys):
    from rest_framework.authtoken.models import Token

    client = api(agent_user)
    key = Token.objects.get(user=agent_user).key
    call_command("revoke_token", "--key", key)
    assert "revoked the token of agent" in capsys.readouterr().out
    assert client.get("/api/v1/policies/").status_code == 401
    assert AuditEvent.objects.filter(action=AuditAction.TOKEN_REVOKED, subject="agent").count() == 1


def test_revoke_token_names_what_it_could_not_find(db, agent_user):
    with pytest.raises(CommandError, match="no such key"):
        call_command("revoke_token", "--key", "0" * 40)
    with pytest.raises(CommandError, match="'nobody' has no token"):
        call_command("revoke_token", "nobody")
    with pytest.raises(CommandError, match="either USERNAME or --key"):
        call_command("revoke_token")


def test_audit_events_cannot_be_changed_or_deleted(published_policy):
    event = AuditEvent.objects.first()
    event.actor_name = "someone else"
    with pytest.raises(Immutable):
        event.save()
    with pytest.raises(Immutable):
        event.delete()


def test_the_policy_page_shows_the_trail_to_members_only(published_policy, editor_user, outsider_user, client):
    call_command("issue_token", "bot", "--tenant", "tenant-x", "--role", "agent")
    call_command("issue_token", "stranger", "--tenant", "tenant-z", "--role", "agent")
    client.force_login(editor_user)
    page = client.get(f"/policies/{POLICY}/").content.decode()
    section = page[page.index('id="audit"'):]
    assert "revision_published" in section and "revision_created" in section
    assert "editor" in section and "token_issued" in section and "bot" in section
    assert "stranger" not in section  # another tenant's token events
    client.force_login(outsider_user)
    assert client.get(f"/policies/{POLICY}/").status_code == 404
