"""Search within a run (issue 52): the items whose label or text holds the words, each linked to
the inspector on it at the step where it matters; bounded, tenant-scoped, escaped. The expected
steps are written by hand from how the test builds the run (which steps copy which request)."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ctxeng.accounts.models import Tenant
from ctxeng.engine.hashing import sha256_text
from manifests.dashboard_selectors import RUN_SEARCH_HITS
from manifests.examples import example_json, example_text
from policies.services import policy_import

from .conftest import XSS_CONTENT, run_job
from .long_run import corrected_step, long_run


def _hits(body: str) -> list[tuple[str, str, str]]:
    """(job id, item id, step id) of each hit listed."""
    return re.findall(r'<a class="search-hit" href="/assemblies/([^/]+)/\?item=([^"]+)"><code>[^<]*</code> at ([^<]+)</a>', body)


def test_a_corrections_words_find_it_at_the_step_it_arrived(owner_client, example):
    jobs = long_run([example["ready"], corrected_step(example)], steps=60, block=45)  # steps 46-60 carry it
    body = owner_client.get("/runs/run-long/search/", {"q": "cite CONTINUE at its newest"}).content.decode()
    assert _hits(body) == [(str(jobs[45].id), "user-correction", "step-46")]
    assert "found in its text" in body and "in 15 steps" in body
    assert "user: “Correction: leave hello-agents out, and cite continue at its newest…”" in body.replace("&#x27;", "'")


def test_an_item_excluded_for_one_reason_all_along_opens_at_its_first_step(owner_client, example):
    # steps 1-3 copy the ready step, 4-6 the blocked one, 7-9 the ready one again; the worked
    # example's expected.json and expected-blocked.json both exclude plan-42-r4 as stale_revision
    jobs = long_run([example["ready"], example["blocked"]], steps=9, block=3)
    body = owner_client.get("/runs/run-long/search/", {"q": "Plan v4"}).content.decode()
    assert _hits(body) == [(str(jobs[0].id), "plan-42-r4", "step-1")]
    assert "stale_revision" in body and "in 9 steps" in body


def test_the_searchs_queries_do_not_grow_with_the_runs_length(owner_client, example):
    # the same three requests in both runs: what grows is the steps, 6 against 200
    long_run([example["ready"], example["blocked"], example["hostile"]], steps=6, run_id="run-short", block=1)
    long_run([example["ready"], example["blocked"], example["hostile"]], steps=200, block=1)
    with CaptureQueriesContext(connection) as short:
        owner_client.get("/runs/run-short/search/", {"q": "plan"})
    with CaptureQueriesContext(connection) as long:
        body = owner_client.get("/runs/run-long/search/", {"q": "plan"}).content.decode()
    assert len(long.captured_queries) == len(short.captured_queries)
    assert "newest 3 distinct requests" in body and "its 200 steps searched" in body
    assert 0 < len(_hits(body)) <= RUN_SEARCH_HITS
    many = owner_client.get("/runs/run-long/search/", {"q": "e"}).content.decode()
    assert len(_hits(many)) == RUN_SEARCH_HITS and f"(the first {RUN_SEARCH_HITS})" in many


def test_the_search_stays_in_the_run_and_the_tenant(owner_client, example):
    outsider_client = Client()  # a client of its own: the fixtures' clients are one object
    outsider_client.force_login(example["outsider"])
    tenant = Tenant.objects.get(slug="tenant-o")
    policy_import(tenant=tenant, text=example_text("policy.yaml"), user=example["outsider"], publish=True, note="o")
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", "tenant-o"))
    template = next(c for c in request["candidates"] if c["item_id"] == "evidence-pi-transform-context")
    words = "zanzibar only in tenant-o"
    request["candidates"].append({**template, "item_id": "only-in-tenant-o", "content": words, "content_hash": sha256_text(words)})
    run_job(example["outsider"], request, "tenant-o")  # tenant-o's own run-42
    assert _hits(owner_client.get("/runs/run-42/search/", {"q": "zanzibar"}).content.decode()) == []
    assert _hits(owner_client.get("/runs/run-42/search/", {"q": "only-in-tenant-o"}).content.decode()) == []
    assert [hit[1] for hit in _hits(outsider_client.get("/runs/run-42/search/", {"q": "zanzibar"}).content.decode())] == ["only-in-tenant-o"]
    long_run([example["ready"]], steps=2, run_id="run-elsewhere")
    corrected_step(example, words="Correction: quokka")  # in run-42, not in run-elsewhere
    assert _hits(owner_client.get("/runs/run-elsewhere/search/", {"q": "quokka"}).content.decode()) == []
    assert [hit[1] for hit in _hits(owner_client.get("/runs/run-42/search/", {"q": "quokka"}).content.decode())] == ["user-correction"]


def test_an_outsider_gets_404_and_a_long_query_a_400_naming_q(owner_client, example):
    outsider_client = Client()
    outsider_client.force_login(example["outsider"])
    assert outsider_client.get("/runs/run-long-nothing/search/", {"q": "x"}).status_code == 404
    long_run([example["ready"]], steps=2)
    assert outsider_client.get("/runs/run-long/search/", {"q": "plan"}).status_code == 404
    response = owner_client.get("/runs/run-long/search/", {"q": "x" * 201})
    assert response.status_code == 400 and "q: at most 200 characters" in response.content.decode()


def test_what_the_search_shows_of_an_items_text_is_escaped(owner_client, example):
    body = owner_client.get("/runs/run-42/search/", {"q": "alert('content')"}).content.decode()
    assert [hit[1] for hit in _hits(body)] == ["plan-42-r5"]
    assert XSS_CONTENT not in body and "<script>" not in body.split("<main", 1)[1]
    assert "&lt;script&gt;alert(&#x27;content&#x27;)&lt;/script&gt;" in body


@pytest.mark.parametrize("q", ["", "   "])
def test_an_empty_search_lists_nothing(owner_client, example, q):
    body = owner_client.get("/runs/run-42/search/", {"q": q}).content.decode()
    assert _hits(body) == [] and "found for" not in body


def test_an_item_is_found_by_its_decisions_words_when_its_text_and_label_lack_them(owner_client, example):
    # plan-42-r4's exclusion detail says "task_spec requires 5"; neither its text nor its label (nor
    # any other candidate's) holds those words: the decision's columns find it
    jobs = long_run([example["ready"]], steps=3, block=3)
    assert "task_spec requires" not in json.dumps(example_json("request.json"))
    body = owner_client.get("/runs/run-long/search/", {"q": "task_spec requires 5"}).content.decode()
    assert _hits(body) == [(str(jobs[0].id), "plan-42-r4", "step-1")]
