"""/why/ over a long run (issue 41): repeated decisions grouped into one row per run, item,
decision and reason naming its first and last step; filters by run, step and the day sealed; the
search reaches the decision's detail text. Expected rows are counted here from the generated run's
shape (every step of it excludes plan-42-r4 as stale_revision)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from .long_run import long_run


def _groups(body: str) -> list[str]:
    table = body.split('class="dense why-groups"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S)


def test_repeated_decisions_are_one_row_naming_the_first_and_last_step(owner_client, example):
    jobs = long_run([example["ready"], example["hostile"]], steps=46)
    body = owner_client.get("/why/", {"q": "plan-42-r4", "run": "run-long"}).content.decode()
    assert "46 decisions in 1 group" in body
    (row,) = _groups(body)
    assert "stale_revision" in row and "(46 steps)" in row
    assert f'href="/assemblies/{jobs[0].id}/?item=plan-42-r4">step-1</a> … ' in row
    assert f'<a href="/assemblies/{jobs[-1].id}/?item=plan-42-r4">step-46</a>' in row
    # every step's row on request: one per step
    every = owner_client.get("/why/", {"q": "plan-42-r4", "run": "run-long", "group": "none"}).content.decode()
    assert "46 decisions" in every


def test_why_filters_by_run_step_and_day(owner_client, example):
    long_run([example["ready"]], steps=5)
    # run-42 has three steps excluding plan-42-r4, run-long five: without a run filter, two groups
    both = owner_client.get("/why/", {"q": "plan-42-r4"}).content.decode()
    assert "8 decisions in 2 groups" in both
    one_step = owner_client.get("/why/", {"q": "plan-42-r4", "run": "run-long", "step": "step-3"}).content.decode()
    (row,) = _groups(one_step)
    assert ">step-3</a>" in row and "steps)" not in row
    today = timezone.now().date()
    later = owner_client.get("/why/", {"q": "plan-42-r4", "since": (today + timedelta(days=2)).isoformat()}).content.decode()
    assert "0 decisions in 0 groups" in later
    earlier = owner_client.get("/why/", {"q": "plan-42-r4", "until": (today - timedelta(days=2)).isoformat()}).content.decode()
    assert "0 decisions in 0 groups" in earlier
    around = owner_client.get("/why/", {"q": "plan-42-r4", "since": (today - timedelta(days=1)).isoformat(),
                                        "until": (today + timedelta(days=1)).isoformat()}).content.decode()
    assert "8 decisions in 2 groups" in around
    bad = owner_client.get("/why/", {"q": "plan-42-r4", "since": "yesterday"}).content.decode()
    assert "is not a date (YYYY-MM-DD)" in bad and "8 decisions in 2 groups" in bad


def test_why_searches_the_decisions_detail_text(owner_client, example):
    # plan-42-r4's detail (example request): "artifact_id 'plan-42' is at revision 4; task_spec requires 5"
    body = owner_client.get("/why/", {"q": "is at revision 4"}).content.decode()
    items = {re.search(r"<code>([^<]+)</code>", row).group(1) for row in _groups(body)}
    assert items == {"plan-42-r4"}


def test_an_outsider_finds_nothing_of_another_tenant_by_run(outsider_client, example):
    body = outsider_client.get("/why/", {"run": "run-42"}).content.decode()
    assert "0 decisions in 0 groups" in body and "?item=plan-42-r4" not in body


def test_why_lists_duplicate_as_a_reason_and_filters_by_it(owner_client, example):
    from .conftest import run_job
    from .test_inspector import _reread_request

    run_job(example["owner"], _reread_request(), "rereads")
    body = owner_client.get("/why/", {"reason": "duplicate", "decision": "excluded"}).content.decode()
    assert '<option value="duplicate" selected>duplicate</option>' in body
    rows = _groups(body)
    assert {re.search(r"<code>([^<]+)</code>", row).group(1) for row in rows} == {"result-dup-1"}
    assert 'class="badge warn">duplicate' in rows[0]
