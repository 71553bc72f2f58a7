"""The run page's item timeline: per item, one cell per step (in with its partition, out with its
reason, or absent), each cell opening that step's inspector on the item; paged in bounded queries."""

from __future__ import annotations

import re

from manifests.examples import example_json

from .conftest import run_job


def _rows(body: str) -> dict[str, str]:
    table = body.split('class="dense run-grid"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td><code>([^<]+)</code></td>(.*?)</tr>", table, re.S)
    return {item_id: cells for item_id, cells in rows}


def test_each_item_has_one_cell_per_step_with_its_decision(owner_client, example):
    body = owner_client.get("/runs/run-42/").content.decode()
    rows = _rows(body)
    candidates = set()
    for name in ("request.json", "request-blocked.json"):
        candidates |= {c["item_id"] for c in example_json(name)["candidates"]}
    assert set(rows) == candidates
    # a stale revision is out at every step, each cell naming the reason and linking to that step's inspector
    stale = rows["plan-42-r4"]
    assert stale.count("stale_revision") == 3
    for job in (example["ready"], example["blocked"], example["hostile"]):
        assert f'href="/assemblies/{job.id}/?item=plan-42-r4"' in stale


def test_an_item_missing_from_a_step_shows_a_gap_there(owner_client, example):
    rows = _rows(owner_client.get("/runs/run-42/").content.decode())
    blocked_ids = {c["item_id"] for c in example_json("request-blocked.json")["candidates"]}
    missing = [c["item_id"] for c in example_json("request.json")["candidates"] if c["item_id"] not in blocked_ids]
    assert missing
    for item_id in missing:
        assert rows[item_id].count('class="step-cell absent"') == 1, item_id


def test_only_items_that_changed_between_steps(owner_client, example):
    body = owner_client.get("/runs/run-42/?changed=1").content.decode()
    ids = {name: {c["item_id"] for c in example_json(name)["candidates"]} for name in ("request.json", "request-blocked.json")}
    assert sorted(_rows(body)) == sorted(ids["request.json"] ^ ids["request-blocked.json"])


def test_a_decision_that_flips_is_listed_as_changed(owner_client, example):
    request = example_json("request.json")
    request["step_id"] = "step-21"
    request["candidates"] = [c for c in request["candidates"] if c["item_id"] != "plan-42-r5"]
    for candidate in request["candidates"]:
        if candidate["item_id"] == "web-context7-overview":
            candidate["freshness"] = "expired"
    run_job(example["owner"], request, "flip")
    rows = _rows(owner_client.get("/runs/run-42/?changed=1").content.decode())
    assert "web-context7-overview" in rows and "plan-42-r5" in rows
    assert 'class="step-cell excluded"' in rows["web-context7-overview"]


def test_the_timeline_pages_items_in_bounded_queries(owner_client, example, django_assert_max_num_queries):
    request = example_json("request.json")
    for step in range(3):
        body = dict(request, step_id=f"step-extra-{step}")
        body["candidates"] = request["candidates"] + [
            {**request["candidates"][0], "item_id": f"extra-{step}-{n}"} for n in range(30)]
        run_job(example["owner"], body, f"extra-{step}")
    with django_assert_max_num_queries(10):
        first = owner_client.get("/runs/run-42/").content.decode()
    assert len(_rows(first)) == 50 and "page 1 of" in first
    with django_assert_max_num_queries(10):
        second = owner_client.get("/runs/run-42/?page=2").content.decode()
    assert not set(_rows(first)) & set(_rows(second))


def test_an_outsider_gets_404_for_the_run(outsider_client, example):
    assert outsider_client.get("/runs/run-42/").status_code == 404
