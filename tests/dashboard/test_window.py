"""The window view: what is eating the model's window, per assembly and across a run's steps.

The expected figures are computed here from the sealed document's included and excluded records
(the engine's output, read whole), with the source written out by hand: the tool name, else the
repository, else the URL's host (urllib), else none. The page's SQL aggregates and filters are
the code under test; a manifest without item rows (read from the document) must agree with them.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench import workload
from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json
from manifests.models import Manifest
from manifests.selectors import manifest_document

from .conftest import run_job


def _source_by_hand(ref: dict) -> str:
    for key in ("tool_name", "tool"):
        if ref.get(key):
            return f"tool:{ref[key]}"
    if ref.get("repo"):
        return f"repo:{ref['repo']}"
    host = urlsplit(ref["url"]).hostname if isinstance(ref.get("url"), str) and "://" in ref["url"] else None
    return f"host:{host}" if host else "none"


def _document(job) -> dict:
    return manifest_document(Manifest.objects.get(job=job))


def _expected(document: dict, dimension: str) -> dict[str, int]:
    """Included tokens per key of `dimension`, from the sealed records."""
    totals: dict[str, int] = defaultdict(int)
    for record in document["included"]:
        key = _source_by_hand(record["source_ref"]) if dimension == "source" else record[dimension]
        totals[key] += record["tokens"]
    return dict(totals)


def _table(body: str, name: str) -> list[tuple[str, int]]:
    """(filter value from the row's link, tokens) of each row of one window table, in page order."""
    section = body.split(f'id="window-{name}"', 1)[1].split("</section>", 1)[0]
    rows = re.findall(r'<td class="window-key"><a href="/assemblies/[^/]+/\?' + name + r'=([^&"]+)&amp;sort=tokens">.*?</a></td>\s*'
                      r'<td class="num">(\d+)</td>', section, re.S)
    from urllib.parse import unquote
    return [(unquote(key), int(tokens)) for key, tokens in rows]


def _listed(body: str) -> list[tuple[str, int | None]]:
    """(item id, tokens) of each row of the inspector's item list, in order."""
    listed = body.split('id="items"', 1)[1].split('id="inspector"', 1)[0]
    rows = re.findall(r'<td class="item-cell"><a [^>]*href="[^"]*"[^>]*><code>([^<]+)</code></a>.*?<td class="num">(?:<span[^>]*>[^<]*</span>)?(\d*)</td>',
                      listed, re.S)
    return [(html.unescape(item_id), int(tokens) if tokens else None) for item_id, tokens in rows]


@pytest.mark.parametrize("dimension", ["source", "source_type", "kind", "partition"])
def test_each_table_totals_the_included_tokens_largest_first(owner_client, example, dimension):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/window/").content.decode()
    expected = _expected(_document(example["ready"]), dimension)
    shown = _table(body, dimension)
    assert {key: tokens for key, tokens in shown if tokens} == expected
    assert [tokens for _, tokens in shown] == sorted((tokens for _, tokens in shown), reverse=True)


def test_the_worked_example_reads_repositories_hosts_and_tools(owner_client, example):
    shown = dict(_table(owner_client.get(f"/assemblies/{example['ready'].id}/window/").content.decode(), "source"))
    assert {"repo:pi", "repo:continue", "host:context7.com"} <= set(shown)


def test_each_row_opens_the_item_list_filtered_to_it_largest_first(owner_client, example):
    job = example["ready"]
    document = _document(job)
    body = owner_client.get(f"/assemblies/{job.id}/window/").content.decode()
    for key, _ in _table(body, "source"):
        listed = _listed(owner_client.get(f"/assemblies/{job.id}/", {"source": key, "sort": "tokens"}).content.decode())
        records = [r for d in ("included", "excluded") for r in document[d] if _source_by_hand(r["source_ref"]) == key]
        assert sorted(item_id for item_id, _ in listed) == sorted(r["item_id"] for r in records), key
        counted = [tokens for _, tokens in listed if tokens is not None]
        assert counted == sorted(counted, reverse=True), key
        assert all(tokens is None for _, tokens in listed[len(counted):]), "an item never counted lists last"


def _crafted_request() -> dict:
    """The worked example plus items whose source_refs try each corner of the source reading."""
    request = example_json("request.json")
    request["step_id"] = "step-sources"
    template = next(c for c in request["candidates"] if c["item_id"] == "web-context7-overview")
    refs = {
        "src-upper-port": {"url": "HTTPS://User@Docs.Example.ORG:8443/a?b#c"},
        "src-same-host": {"url": "https://docs.example.org/other"},
        "src-other-scheme": {"url": "ftp://files.example.net/pub"},
        "src-no-scheme": {"url": "docs.example.org/page"},
        "src-tool-name": {"tool_name": "web_fetch", "url": "https://docs.example.org/x"},
        "src-tool": {"tool": "web_fetch", "repo": "pi"},
        "src-repo-and-url": {"repo": "continue", "url": "https://docs.example.org/y"},
        "src-empty-tool": {"tool_name": "", "url": "https://docs.example.org/z"},
        "src-dots": {"url": "https://docsXexample.org/"},
    }
    for item_id, ref in refs.items():
        content = f"{item_id} body"
        request["candidates"].append({**template, "item_id": item_id, "source_type": "web_document", "source_ref": ref,
                                      "content": content, "content_hash": sha256_text(content)})
    return request


def test_the_source_filter_agrees_with_the_reading_by_hand(owner_client, example):
    job = run_job(example["owner"], _crafted_request(), "sources")
    document = _document(job)
    by_source: dict[str, set[str]] = defaultdict(set)
    for record in document["included"] + document["excluded"]:
        by_source[_source_by_hand(record["source_ref"])].add(record["item_id"])
    assert {"src-upper-port", "src-same-host", "src-empty-tool"} <= by_source["host:docs.example.org"]
    assert "src-dots" in by_source["host:docsxexample.org"] and "src-no-scheme" in by_source["none"]
    for key, item_ids in by_source.items():
        listed = _listed(owner_client.get(f"/assemblies/{job.id}/", {"source": key, "sort": "tokens"}).content.decode())
        assert {item_id for item_id, _ in listed} == item_ids, key


def test_the_document_reading_lists_what_the_item_rows_list(owner_client, example):
    job = run_job(example["owner"], _crafted_request(), "sources")
    document = _document(job)
    keys = {_source_by_hand(r["source_ref"]) for r in document["included"] + document["excluded"]}
    urls = [f"/assemblies/{job.id}/window/"] + [f"/assemblies/{job.id}/?source={key}&sort=tokens" for key in sorted(keys)]
    urls += [f"/assemblies/{job.id}/?kind=evidence&sort=tokens", f"/assemblies/{job.id}/?source_type=web_document",
             f"/assemblies/{job.id}/?sort=tokens&item=src-dots"]
    from_rows = [owner_client.get(url).content.decode() for url in urls]
    QuerySet(model=Manifest).filter(job=job).update(sections=None)  # as if written without item rows
    for url, expected in zip(urls, from_rows, strict=True):
        body = owner_client.get(url).content.decode()
        if "/window/" in url:
            for name in ("source", "source_type", "kind", "partition"):
                assert _table(body, name) == _table(expected, name), (url, name)
        else:
            assert _listed(body) == _listed(expected), url


def test_a_bad_sort_or_source_is_dropped_with_a_message(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/", {"sort": "size", "source": "planet:mars"}).content.decode()
    assert "Unknown sort “size”" in body and "Unknown source “planet:mars”" in body


def test_the_list_sorted_by_tokens_opens_on_the_selected_items_page(owner_client, example):
    body = workload.make_request(n_items=300, total_bytes=300 * 200, n_tool_pairs=10, seed=3, context_limit=16_000)
    body["policy"] = {"id": body["policy"]["id"]}
    job = run_job(example["owner"], body, "sorted")
    records = sorted(enumerate(_document(job)["included"] + _document(job)["excluded"]),
                     key=lambda pair: (pair[1]["tokens"] is None, -(pair[1]["tokens"] or 0), pair[0]))
    for index in (0, 77, 160, len(records) - 1):
        item_id = records[index][1]["item_id"]
        page = owner_client.get(f"/assemblies/{job.id}/", {"sort": "tokens", "item": item_id}).content.decode()
        listed = [i for i, _ in _listed(page)]
        assert item_id in listed and listed.index(item_id) == index % 50, (index, item_id)


def _queries(client, url: str) -> int:
    client.get(url)  # the first render warms caches (the session, content types)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_window_and_the_sorted_list_cost_the_same_queries_at_100_and_2000_items(owner_client, example):
    counts = {}
    for n in (100, 2_000):
        body = workload.make_request(n_items=n, total_bytes=n * 150, n_tool_pairs=min(40, n // 10), seed=n, context_limit=16_000)
        body["policy"] = {"id": body["policy"]["id"]}
        job = run_job(example["owner"], body, f"size-{n}")
        middle = _document(job)["included"][-1]["item_id"]
        counts[n] = [_queries(owner_client, url) for url in (
            f"/assemblies/{job.id}/window/", f"/assemblies/{job.id}/?sort=tokens",
            f"/assemblies/{job.id}/?source=host:docs.example.org&sort=tokens&item={middle}",
            f"/assemblies/{job.id}/?kind=evidence&sort=tokens&page=2")]
    assert counts[100] == counts[2_000], counts
    assert max(counts[2_000]) <= 10, counts


def _grown_step(request: dict, step: int) -> dict:
    """Step `step` of a run: the example plus `step` chunks of a log from the `growing` repository."""
    body = dict(request, step_id=f"step-grow-{step}")
    template = next(c for c in request["candidates"] if c["item_id"] == "evidence-pi-transform-context")
    extra = []
    for n in range(step):
        content = f"growing chunk {n}: " + "context rot grows with every step. " * 20
        extra.append({**template, "item_id": f"grow-{n}", "source_ref": {**template["source_ref"], "repo": "growing"},
                      "content": content, "content_hash": sha256_text(content)})
    body["candidates"] = request["candidates"] + extra
    return body


def test_the_run_page_shows_which_sources_grow_step_by_step(owner_client, example):
    request = example_json("request.json")
    request["run_id"] = "run-grow"
    jobs = [run_job(example["owner"], _grown_step(request, step), f"grow-{step}") for step in (1, 3, 5)]
    per_step = [_expected(_document(job), "source").get("repo:growing", 0) for job in jobs]
    assert per_step[0] < per_step[1] < per_step[2]
    body = owner_client.get("/runs/run-grow/window/", {"window_sort": "growth"}).content.decode()
    section = body.split('id="run-window"', 1)[1].split("</section>", 1)[0]
    first_row = re.search(r"<tbody>\s*<tr>(.*?)</tr>", section, re.S).group(1)
    assert "repository growing" in first_row
    cells = re.findall(r'<td class="num">([^<]*)</td>', first_row)
    assert cells == [str(t) for t in per_step]
    assert f'<td class="num growth">+{per_step[2] - per_step[0]}</td>' in first_row
    assert f'href="/assemblies/{jobs[-1].id}/?source=repo%3Agrowing&amp;sort=tokens"' in first_row


def test_a_blocked_assembly_has_a_window_and_another_tenant_sees_none(owner_client, example):
    blocked = example["blocked"]
    body = owner_client.get(f"/assemblies/{blocked.id}/window/").content.decode()
    assert _table(body, "source")  # its excluded and included items, as the sealed lists hold them
    outsider = Client()
    outsider.force_login(example["outsider"])
    assert outsider.get(f"/assemblies/{blocked.id}/window/").status_code == 404
    assert outsider.get(f"/assemblies/{example['ready'].id}/?source=repo:pi&sort=tokens").status_code == 404
