"""The policies list counts each policy's revisions and its drafts from the stored revisions (the
counts here are taken from the rows, not from the selector the page uses)."""

from __future__ import annotations

import re

from policies.models import Policy, RevisionStatus


def _row(body: str, policy_id: str) -> list[str]:
    row = re.search(rf'<tr>\s*<td><a href="[^"]*">{re.escape(policy_id)}</a></td>(.*?)</tr>', body, re.S).group(1)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_each_policy_shows_how_many_revisions_and_how_many_drafts_it_has(owner_client, example):
    body = owner_client.get("/policies/").content.decode()
    policies = list(Policy.objects.filter(tenant=example["ready"].tenant))
    assert policies
    drafts_seen = 0
    for policy in policies:
        revisions = list(policy.revisions.all())
        drafts = sum(1 for r in revisions if r.status == RevisionStatus.DRAFT)
        drafts_seen += drafts
        cells = _row(body, policy.policy_id)
        assert cells[-2:] == [str(len(revisions)), str(drafts)], (policy.policy_id, cells)
    assert drafts_seen, "the example was meant to hold a draft"
