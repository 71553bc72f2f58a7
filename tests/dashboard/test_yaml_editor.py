"""The policy editor refuses YAML anchors and aliases at their line and stores nothing (issue 12:
a 105 KB post of nested aliases became a 10 MB draft that every reviewer's page then rendered)."""

from __future__ import annotations

import html

from policies.models import PolicyRevision
from tests.policies.test_yaml_bounds import laughs


def _editor_text(client) -> str:
    page = client.get("/policies/source-research/revisions/4/edit/").content.decode()
    return html.unescape(page.split('name="body"')[1].split(">", 1)[1].split("</textarea>")[0])


def test_the_editor_refuses_an_aliased_draft_at_its_line_and_stores_nothing(owner_client, example):
    draft = example["draft"]
    before = PolicyRevision.objects.get(pk=draft.pk).body
    text = _editor_text(owner_client)
    posted = text + laughs()
    line = len(text.splitlines()) + 1
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": posted, "action": "save"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "YAML anchors are not accepted (&amp;l0)" in body and f"line {line}" in body
    assert PolicyRevision.objects.get(pk=draft.pk).body == before


def test_the_editor_stores_a_plain_draft_as_posted(owner_client, example):
    text = _editor_text(owner_client).replace("maximum: 1000", "maximum: 1100", 1)
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": text, "action": "save"})
    assert response.status_code == 200
    assert PolicyRevision.objects.get(pk=example["draft"].pk).body["budget"]["partitions"]["background"]["maximum"] == 1100
