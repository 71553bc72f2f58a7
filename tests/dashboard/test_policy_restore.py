"""The policy editor (issue 41): restore revision N as a new draft (its body equal to N's but for the
revision number), diff links that read older → newer, a YAML syntax error placed at the line the
parser stopped on with the lines around it, and line numbers beside the text."""

from __future__ import annotations

import re

from policies.models import PolicyRevision, RevisionStatus
from policies.services import policy_revision_publish


def _without_number(body: dict) -> dict:
    policy = {k: v for k, v in body["policy"].items() if k not in ("revision", "digest")}
    return {**body, "policy": policy}


def test_restoring_revision_3_makes_draft_5_equal_to_it(owner_client, example):
    policy_revision_publish(revision=example["draft"], user=example["owner"], note="floor 0.9")
    page = owner_client.get("/policies/source-research/").content.decode()
    assert re.search(r'<input type="hidden" name="from" value="3">\s*<button type="submit"[^>]*>restore as draft</button>', page)
    response = owner_client.post("/policies/source-research/revisions/new/", {"from": "3"})
    assert response.status_code == 302 and response["Location"] == "/policies/source-research/revisions/5/edit/"
    restored = PolicyRevision.objects.get(policy__policy_id="source-research", revision=5)
    three = PolicyRevision.objects.get(policy__policy_id="source-research", revision=3)
    assert restored.status == RevisionStatus.DRAFT and restored.body["policy"]["revision"] == 5
    assert _without_number(restored.body) == _without_number(three.body)
    # the newest (4, published) is untouched; a plain "new draft" still copies the newest
    assert PolicyRevision.objects.get(policy__policy_id="source-research", revision=4).status == RevisionStatus.PUBLISHED
    owner_client.post("/policies/source-research/revisions/new/")
    six = PolicyRevision.objects.get(policy__policy_id="source-research", revision=6)
    assert _without_number(six.body) == _without_number(restored.body)


def test_a_reviewer_cannot_restore_a_revision(reviewer_client, example):
    assert reviewer_client.post("/policies/source-research/revisions/new/", {"from": "3"}).status_code == 403
    assert "restore as draft" not in reviewer_client.get("/policies/source-research/").content.decode()
    assert not PolicyRevision.objects.filter(revision__gt=4).exists()


def test_restoring_needs_an_existing_revision(owner_client, example):
    assert owner_client.post("/policies/source-research/revisions/new/", {"from": "99"}).status_code == 404
    assert owner_client.post("/policies/source-research/revisions/new/", {"from": "three"}).status_code == 400
    assert not PolicyRevision.objects.filter(revision__gt=4).exists()


def test_each_diff_link_reads_older_to_newer(owner_client, example):
    # published 3, draft 4: the draft's row links 3 → 4
    page = owner_client.get("/policies/source-research/").content.decode()
    assert "?from=3&amp;to=4" in page and "?from=4&amp;to=3" not in page
    policy_revision_publish(revision=example["draft"], user=example["owner"], note="floor 0.9")
    # published 4 now: the older row (3) links 3 → 4 as well, never 4 → 3
    page = owner_client.get("/policies/source-research/").content.decode()
    assert "?from=3&amp;to=4" in page and "?from=4&amp;to=3" not in page


def test_a_yaml_syntax_error_is_shown_at_its_line_with_the_lines_around_it(owner_client, example):
    text = "policy:\n  id: source-research\n  revision: 4\nadmission:\n  min_relevance: 0.9\n   bad: indent\nbudget: {}\n"
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": text, "action": "validate"},
                                 headers={"HX-Request": "true"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "malformed YAML" in body and "line 6" in body and "&lt;unicode string&gt;" not in body
    excerpt = re.search(r'<pre tabindex="0" class="excerpt">(.*?)</pre>', body, re.S).group(1)
    numbers = [int(n) for n in re.findall(r"<span[^>]*>\s*(\d+)  ", excerpt)]
    assert numbers == [4, 5, 6, 7]  # two lines either side of line 6, within the text's 7
    assert re.search(r'<span class="hl">\s*6     bad: indent</span>', excerpt)


def test_the_editor_numbers_its_lines_and_marks_the_errors(owner_client, example):
    page = owner_client.get("/policies/source-research/revisions/4/edit/").content.decode()
    text = PolicyRevision.objects.get(policy__policy_id="source-research", revision=4)
    gutter = re.search(r'<pre class="gutter" aria-hidden="true">(.*?)</pre>', page, re.S).group(1)
    shown = re.findall(r"<span>(\d+)</span>", gutter)
    lines = len(page.split('id="policy-body"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0].split("\n"))
    assert shown == [str(n) for n in range(1, len(shown) + 1)] and abs(len(shown) - lines) <= 1 and text
    bad = "policy:\n  id: source-research\n  revision: 4\nbudget: [unclosed\n"
    failed = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": bad, "action": "validate"}).content.decode()
    gutter = re.search(r'<pre class="gutter" aria-hidden="true">(.*?)</pre>', failed, re.S).group(1)
    assert re.findall(r'<span class="error-line">(\d+)</span>', gutter) == ["4"]


def test_publishing_without_a_finished_preview_is_warned_beside_the_button(owner_client, example):
    from policies.models import ImpactPreview, PreviewStatus
    from policies.services import impact_preview_start

    page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert "publish-unpreviewed" in page and "Publish revision 4 without a preview" in page
    preview = impact_preview_start(revision=example["draft"], user=example["owner"], draft=None)
    # queued (its job starts when the transaction commits): not a preview yet
    assert "publish-unpreviewed" in owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    ImpactPreview.objects.filter(pk=preview.pk).update(status=PreviewStatus.DONE)
    page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert "publish-unpreviewed" not in page and "without a preview" not in page
    # a saved change to the draft makes that preview stale: the warning is back
    ImpactPreview.objects.filter(pk=preview.pk).update(digest="sha256:" + "0" * 64)
    assert "publish-unpreviewed" in owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
