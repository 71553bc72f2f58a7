"""The run page's item timeline: per item, one cell per step (in with its partition, out with its
reason, or absent), each cell opening that step's inspector on the item; paged in bounded queries.
Each attempt shows its manifest's cache-eligible share and the provider-reported cached ratio of its
usage, and the run each overall; the expected ratios are computed here by hand from the reports the
tests post and from the payloads compared byte for byte."""

from __future__ import annotations

import json
import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from ctxeng.accounts.models import Tenant
from manifests.examples import example_json, example_text
from manifests.selectors import manifest_document, manifest_payload
from policies.services import policy_import

from .conftest import run_job


def _rows(body: str) -> dict[str, str]:
    table = body.split('class="dense run-grid"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr>\s*<th class="item-col" scope="row"><code>([^<]+)</code>.*?</th>(.*?)</tr>', table, re.S)
    return {item_id: cells for item_id, cells in rows}


def test_each_item_has_one_cell_per_step_with_its_decision(owner_client, example):
    body = owner_client.get("/runs/run-42/matrix/").content.decode()
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
    rows = _rows(owner_client.get("/runs/run-42/matrix/").content.decode())
    blocked_ids = {c["item_id"] for c in example_json("request-blocked.json")["candidates"]}
    missing = [c["item_id"] for c in example_json("request.json")["candidates"] if c["item_id"] not in blocked_ids]
    assert missing
    for item_id in missing:
        assert rows[item_id].count('class="step-cell absent"') == 1, item_id


def test_only_items_that_changed_between_steps(owner_client, example):
    body = owner_client.get("/runs/run-42/matrix/?changed=1").content.decode()
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
    rows = _rows(owner_client.get("/runs/run-42/matrix/?changed=1").content.decode())
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
        first = owner_client.get("/runs/run-42/matrix/").content.decode()
    assert len(_rows(first)) == 50 and "page 1 of" in first
    with django_assert_max_num_queries(10):
        second = owner_client.get("/runs/run-42/matrix/?page=2").content.decode()
    assert not set(_rows(first)) & set(_rows(second))


def test_an_outsider_gets_404_for_the_run(outsider_client, example):
    assert outsider_client.get("/runs/run-42/").status_code == 404


# --------------------------------------------------------------------------- provider cache hits per step

def _attempts(body: str) -> dict[str, str]:
    """step id -> its row of the step table."""
    table = body.split('class="dense step-table"', 1)[1].split("</table>", 1)[0]
    return dict(re.findall(r'<tr class="step-row [^"]*" id="step-\d+">.*?<td class="step-cell"><a [^>]*>([^<]+)</a>(.*?)</tr>',
                           table, re.S))


def _cache_hit(row: str) -> tuple[str, str]:
    """(title, text) of a step row's provider-cached cell."""
    title, text = re.search(r'<td class="num provider-cached"><span[^>]* title="([^"]*)">([^<]*)</span>', row).groups()
    return title, " ".join(text.split())


def _run_ratio(body: str) -> tuple[str, str]:
    title, text = re.search(r'<p class="provider-cached-run">.*?<strong title="([^"]*)">([^<]*)</strong>', body, re.S).groups()
    return title, text


def _eligible(row: str) -> tuple[str, str]:
    """(title, text) of a step row's cache-eligible cell."""
    title, text = re.search(r'<td class="num cache-eligible"><span[^>]* title="([^"]*)">([^<]*)</span>', row).groups()
    return title, " ".join(text.split())


def _run_eligible(body: str) -> tuple[str, str]:
    title, text = re.search(r'<p class="cache-eligible-run">.*?<strong title="([^"]*)">([^<]*)</strong>', body, re.S).groups()
    return title, text


def _report(api_client, job, input_tokens: int, cached_tokens: int) -> None:
    response = api_client.post(f"/api/v1/assemblies/{job.id}/usage/",
                               {"input_tokens": input_tokens, "cached_tokens": cached_tokens, "output_tokens": 9},
                               format="json")
    assert response.status_code == 200, response.content


def test_each_step_shows_its_cache_hit_ratio_and_the_run_its_overall_ratio(owner_client, example, api):
    owner_api = api(example["owner"])
    _report(owner_api, example["ready"], 1000, 400)
    _report(owner_api, example["hostile"], 800, 600)
    body = owner_client.get("/runs/run-42/").content.decode()
    rows = _attempts(body)
    assert _cache_hit(rows[example["ready"].step_id]) == ("400 of 1000 reported input tokens cached", "40.0%")
    assert _cache_hit(rows[example["hostile"].step_id]) == ("600 of 800 reported input tokens cached", "75.0%")
    # (400 + 600) / (1000 + 800), weighted by tokens: not the mean of 40% and 75%
    assert _run_ratio(body) == ("1000 of 1800 reported input tokens cached", "55.6%")
    assert "over the 2 of 2 ready steps with reported usage" in body


def test_a_step_without_a_usage_report_shows_a_placeholder(owner_client, example, api):
    _report(api(example["owner"]), example["ready"], 1000, 0)
    rows = _attempts(owner_client.get("/runs/run-42/").content.decode())
    assert _cache_hit(rows[example["ready"].step_id]) == ("0 of 1000 reported input tokens cached", "0.0%")
    for job in (example["blocked"], example["hostile"]):
        assert _cache_hit(rows[job.step_id]) == ("no usage reported", "—")


def test_a_run_with_no_usage_reported_has_no_overall_ratio(owner_client, example):
    body = owner_client.get("/runs/run-42/").content.decode()
    assert _run_ratio(body) == ("no usage reported", "—")
    assert "no step has reported usage" in body


def test_a_report_of_zero_input_tokens_has_no_ratio(owner_client, example, api):
    _report(api(example["owner"]), example["ready"], 0, 0)
    body = owner_client.get("/runs/run-42/").content.decode()
    assert _cache_hit(_attempts(body)[example["ready"].step_id]) == ("0 input tokens reported", "—")
    assert _run_ratio(body) == ("0 input tokens reported", "—")


def test_another_tenants_usage_never_counts(owner_client, example, api):
    """tenant-o has its own run-42 with a report; tenant-x's run page counts tenant-x's alone."""
    outsider = example["outsider"]
    policy_import(tenant=Tenant.objects.get(slug="tenant-o"), text=example_text("policy.yaml"), user=outsider,
                  publish=True, note="tenant-o copy")
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", "tenant-o"))
    theirs = run_job(outsider, request, "tenant-o-run-42")
    assert theirs.status == "ready" and theirs.run.run_id == "run-42" and theirs.tenant.slug == "tenant-o"
    _report(api(outsider), theirs, 4321, 4321)
    _report(api(example["owner"]), example["ready"], 1000, 250)
    body = owner_client.get("/runs/run-42/").content.decode()
    assert _run_ratio(body) == ("250 of 1000 reported input tokens cached", "25.0%")
    assert "over the 1 of 2 ready steps with reported usage" in body
    assert "4321" not in body


def test_cache_hit_ratios_cost_no_query_per_step(owner_client, example, api):
    owner_api = api(example["owner"])
    request = example_json("request.json")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert owner_client.get("/runs/run-42/").status_code == 200
        return len(captured)

    _report(owner_api, example["ready"], 1000, 400)
    before = queries()
    for step in range(4):
        job = run_job(example["owner"], dict(request, step_id=f"step-cached-{step}"), f"cached-{step}")
        _report(owner_api, job, 1000 + step, 500)
    assert queries() == before


# --------------------------------------------------------------------------- the cache-eligible share


def _units(payload: dict) -> list:
    """The payload as a provider reads it: model and tools, the system text, then each message."""
    return [{"model": payload["model"], "tools": payload.get("tools") or []},
            *([payload["system"]] if "system" in payload else []), *payload["messages"]]


def test_the_run_page_shows_the_manifests_cache_eligible_share_step_by_step_and_over_the_run(owner_client, example):
    """The same request sent again with the first step's cache record: the two payloads are the
    same bytes (compared here), so the second step is all eligible, the first (no previous step)
    none, and the run half."""
    request = example_json("request.json")
    first = run_job(example["owner"], dict(request, run_id="run-cache", step_id="step-1"), "cache-1")
    second = run_job(example["owner"], dict(request, run_id="run-cache", step_id="step-2",
                                            previous_cache=manifest_document(first.manifest)["cache"]),
                     "cache-2")
    a, b = manifest_payload(first.manifest), manifest_payload(second.manifest)
    assert json.dumps(_units(a), sort_keys=True) == json.dumps(_units(b), sort_keys=True)
    body = owner_client.get("/runs/run-cache/").content.decode()
    rows = _attempts(body)
    assert _eligible(rows["step-1"])[1] == "0.0%"
    title, text = _eligible(rows["step-2"])
    assert text == "100.0%"
    total = int(title.split(" of ")[1].split()[0])
    assert title == f"{total} of {total} payload text tokens repeat the previous step's payload" and total > 0
    assert _run_eligible(body) == (f"{total} of {2 * total} payload text tokens repeat the previous step's payload", "50.0%")
    inspector = owner_client.get(f"/assemblies/{second.id}/").content.decode()
    assert re.search(r'<dd class="cache-eligible"><strong>100.0%</strong>', inspector)


def test_a_blocked_step_has_no_cache_eligible_share(owner_client, example):
    body = owner_client.get("/runs/run-42/").content.decode()
    (row,) = re.findall(r'<tr class="step-row blocked".*?</tr>', body, re.S)
    cell = re.search(r'<td class="num cache-eligible">(.*?)</td>', row).group(1)
    assert 'title="no payload"' in cell and "%" not in cell


def _timeline_order(example, sort: str) -> list[str]:
    """The documented orders of the timeline, from the run's sealed documents: `changed` by how
    often the item changed (distinct decisions + distinct reasons + 1 when missing from a step),
    then by excluded steps, then by id; `excluded` by excluded steps, then by id."""
    seen: dict[str, dict] = {}
    jobs = [example["ready"], example["blocked"], example["hostile"]]
    for job in jobs:
        document = manifest_document(job.manifest)
        for decision, records in (("included", document["included"]), ("excluded", document["excluded"])):
            for record in records:
                entry = seen.setdefault(record["item_id"], {"decisions": set(), "reasons": set(), "steps": 0, "excluded": 0})
                entry["decisions"].add(decision)
                entry["reasons"].add(record.get("reason") or "")
                entry["steps"] += 1
                entry["excluded"] += decision == "excluded"

    def changed(item_id):
        e = seen[item_id]
        return (-(len(e["decisions"]) + len(e["reasons"]) + (e["steps"] < len(jobs))), -e["excluded"], item_id)

    def excluded(item_id):
        return (-seen[item_id]["excluded"], item_id)

    return sorted(seen, key=changed if sort == "changed" else excluded)


def test_the_timeline_sorts_by_most_changed_and_by_most_excluded_as_documented(owner_client, example):
    for sort in ("changed", "excluded"):
        response = owner_client.get(f"/runs/run-42/matrix/?sort={sort}")
        assert response.status_code == 200, sort
        shown = list(_rows(response.content.decode()))
        expected = _timeline_order(example, sort)
        assert shown == expected[:len(shown)], sort
        assert shown != sorted(shown), sort  # not merely the id order
