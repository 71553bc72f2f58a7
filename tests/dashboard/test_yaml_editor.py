"""The policy editor refuses YAML anchors and aliases at their line and stores nothing (issue 12:
a 105 KB post of nested aliases became a 10 MB draft that every reviewer's page then rendered)."""

from __future__ import annotations

import html

import pytest
import yaml.composer

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


def _many_keys(count: int) -> str:
    return "".join(f"key{i}: {i}\n" for i in range(count))


@pytest.mark.parametrize("action", ["validate", "save"])
def test_the_editor_refuses_two_hundred_thousand_keys_before_parsing_and_stores_nothing(
        owner_client, example, action, monkeypatch):
    """Issue 30, finding 6: the editor's Validate held a worker ~31 s on this text."""
    loads: list[int] = []  # documents PyYAML's composer built: the loader's, or a line lookup's
    monkeypatch.setattr(yaml.composer.Composer, "compose_document", lambda self: loads.append(1))
    before = PolicyRevision.objects.get(pk=example["draft"].pk).body
    response = owner_client.post("/policies/source-research/revisions/4/edit/",
                                 {"body": _many_keys(200_000), "action": action})
    assert response.status_code == 422
    assert "bytes of YAML, more than the limit 1048576" in response.content.decode()
    assert loads == [] and PolicyRevision.objects.get(pk=example["draft"].pk).body == before


def test_an_impact_preview_of_two_hundred_thousand_keys_is_refused_before_parsing(owner_client, example, monkeypatch):
    from policies.models import ImpactPreview

    loads: list[int] = []
    monkeypatch.setattr(yaml.composer.Composer, "compose_document", lambda self: loads.append(1))
    response = owner_client.post("/policies/source-research/revisions/4/impact/run/",
                                 {"body": _many_keys(200_000), "editor": "1"}, HTTP_HX_REQUEST="true")
    assert "bytes of YAML, more than the limit 1048576" in response.content.decode()
    assert loads == [] and not ImpactPreview.objects.exists()
