"""The manifest page of a manifest the service sealed reads `sections` and one page of item rows.

Its queries never touch the sealed document, so its cost does not grow with the item count, and
the page shows what the document-reading page (a manifest without `sections`) shows.
"""

from __future__ import annotations

import html
import re

import pytest
from django.db.models import QuerySet

from bench import workload
from manifests.dashboard_selectors import REASON_ORDER
from manifests.models import ItemDecision, Manifest, ManifestItem
from manifests.selectors import item_record_of, manifest_document

from .conftest import run_job

N_ITEMS = 1_200


@pytest.fixture
def big(example):
    body = workload.make_request(n_items=N_ITEMS, total_bytes=N_ITEMS * 200, n_tool_pairs=30, seed=7, context_limit=16_000)
    body["policy"] = {"id": body["policy"]["id"]}
    return run_job(example["owner"], body, "big")


def _page(client, url: str) -> str:
    """The page's HTML without its per-response CSRF token."""
    return re.sub(r'(CSRFToken": "|csrfmiddlewaretoken" value=")[^"]+', r"\1", client.get(url).content.decode())


def _region(body: str, start: str, end: str) -> str:
    return body.split(start, 1)[1].split(end, 1)[0]


def _forget_sections(job) -> None:
    """Make the manifest look as if written without `sections` (Manifest's own queryset refuses
    bulk updates)."""
    QuerySet(model=Manifest).filter(job=job).update(sections=None)


def _document(job) -> dict:
    return manifest_document(Manifest.objects.get(job=job))


def test_sealing_stores_the_page_sections_and_each_items_record(big):
    manifest = Manifest.objects.get(job=big)
    document = _document(big)
    assert manifest.sections["included_total"] == len(document["included"])
    assert manifest.sections["excluded_total"] == len(document["excluded"])
    assert all("before_excerpt" not in t for t in manifest.sections["transforms"])
    first = ManifestItem.objects.filter(manifest=manifest, decision="excluded").order_by("position").first()
    assert item_record_of(first) == document["excluded"][0]
    # Rows are written in the default list's order: included, then by exclusion reason.
    reasons = list(ManifestItem.objects.filter(manifest=manifest, decision="excluded").order_by("id").values_list("reason", flat=True))
    ranks = [REASON_ORDER.index(reason) for reason in reasons]
    assert ranks == sorted(ranks) and len(set(reasons)) > 1


def test_the_page_of_a_big_manifest_never_reads_its_document(owner_client, big, django_assert_max_num_queries):
    with django_assert_max_num_queries(10) as captured:
        body = owner_client.get(f"/assemblies/{big.id}/").content.decode()
    assert not any('"document_packed"' in query["sql"] for query in captured.captured_queries)
    document = _document(big)
    assert f"{len(document['included']) + len(document['excluded'])} items · page 1 of" in body
    assert "Loading the transforms with their before/after excerpts" in body


def _inspector_urls(big) -> list[str]:
    document = _document(big)
    last_excluded = document["excluded"][-1]["item_id"]
    transformed = next(t["output_item_id"] for t in document["transforms"] if t["status"] == "applied")
    evicted = [r["item_id"] for r in document["excluded"] if r["reason"] == "budget_evicted"]
    included = [r["item_id"] for r in document["included"]]
    return [
        f"/assemblies/{big.id}/?item={evicted[len(evicted) // 2]}",
        f"/assemblies/{big.id}/?reason=budget_evicted&item={evicted[-1]}",
        f"/assemblies/{big.id}/?decision=included&item={included[-1]}",
        f"/assemblies/{big.id}/?decision=excluded&item={included[-1]}",
        f"/assemblies/{big.id}/?item={last_excluded}",
        f"/assemblies/{big.id}/?item={transformed}",
        f"/assemblies/{big.id}/?q=item-1&group=partition&item={last_excluded}",
        f"/assemblies/{big.id}/?q={last_excluded[:4]}&group=zone&item={last_excluded}",
        f"/assemblies/{big.id}/?decision=excluded&group=zone&page=3",
        f"/assemblies/{big.id}/?reason=budget_evicted&q=code",
        f"/assemblies/{big.id}/?partition=background&group=none&item={transformed}",
    ]


def test_the_inspector_and_its_filters_cost_a_bounded_number_of_queries(owner_client, big, django_assert_max_num_queries):
    for url in _inspector_urls(big):
        with django_assert_max_num_queries(10):
            response = owner_client.get(url)
        assert response.status_code == 200 and b'class="problems"' not in response.content, url


def test_the_page_focuses_an_item_on_a_later_page(owner_client, big):
    last = _document(big)["excluded"][-1]["item_id"]
    body = owner_client.get(f"/assemblies/{big.id}/?item={last}").content.decode()
    listed = _region(body, 'id="items"', 'id="inspector"')
    assert f"<code>{last}</code>" in listed and 'class="focus"' in listed
    assert "page 1 of" not in listed


REGIONS = (('id="overview"', 'id="items"'), ('id="items"', 'id="inspector"'), ('id="inspector"', 'id="item-excerpts"'),
           ('<h3>Submitted content</h3>', 'id="header"'), ('id="header"', 'id="budget"'),
           ('id="acquisition"', 'id="transforms"'), ('id="tool-pairs"', 'id="serialized-input"'))


def test_the_page_shows_what_the_document_shows(owner_client, big):
    """Excerpts aside (the sealed page loads them on demand, the document page has them at hand).
    A manifest without `sections` was sealed before its decisions stored labels (migration
    manifests.0011 came later), so both pages are read with the labels blank: each then shows
    what the source refs name (the stored labels: tests/dashboard/test_user_turn_labels.py)."""
    urls = [f"/assemblies/{big.id}/?page=3", *_inspector_urls(big)]
    assert ItemDecision.objects.filter(tenant=big.tenant).exclude(label="").update(label="") > 0
    from_sections = [owner_client.get(url).content.decode() for url in urls]
    _forget_sections(big)
    for url, expected in zip(urls, from_sections, strict=True):
        from_document = owner_client.get(url).content.decode()
        for start, end in REGIONS:
            if start in expected:
                end = end if end in expected.split(start, 1)[1] else 'id="header"'
                same = [re.sub(r"\s+", " ", _region(body, start, end)) for body in (expected, from_document)]
                assert same[0] == same[1], (url, start)


def test_the_selected_items_excerpts_load_on_demand(owner_client, big, django_assert_max_num_queries):
    record = next(t for t in _document(big)["transforms"] if t.get("after_excerpt"))
    with django_assert_max_num_queries(10) as captured:
        page = owner_client.get(f"/assemblies/{big.id}/?item={record['output_item_id']}").content.decode()
    assert not any('"document_packed"' in query["sql"] for query in captured.captured_queries)
    assert "Loading the before/after excerpts" in page and record["after_excerpt"][:30] not in page
    excerpts = owner_client.get(f"/assemblies/{big.id}/item/?item_id={record['output_item_id']}&part=excerpts").content.decode()
    assert html.escape(record["after_excerpt"].splitlines()[0][:40]) in excerpts


def test_the_transform_excerpts_load_on_demand(owner_client, big):
    excerpt = next(t["after_excerpt"] for t in _document(big)["transforms"] if t.get("after_excerpt"))
    body = owner_client.get(f"/assemblies/{big.id}/transforms/?page=1").content.decode()
    assert excerpt.splitlines()[0][:40] in body.replace("&#x27;", "'").replace("&quot;", '"')


def test_a_count_that_is_only_a_lower_bound_reads_as_one(owner_client, big):
    document = _document(big)
    bound = [x for x in document["excluded"] if x["token_count"] == "lower_bound"]
    exact = [x for x in document["excluded"] if x["token_count"] == "exact" and x["tokens"]]
    assert bound and exact  # the budget evicted most items on their bounds, and counted others
    item = bound[0]
    body = owner_client.get(f"/assemblies/{big.id}/?item={item['item_id']}").content.decode()
    inspector = _region(body, '<dd class="tokens">', "</dd>")
    assert inspector.startswith(f"at least {item['tokens']} ") and "never counted" in inspector
    row = _region(body, f'<code>{item["item_id"]}</code>', "</tr>")
    assert f'never counted">≥&#8239;</span>{item["tokens"]}</td>' in row
    counted = exact[0]
    body = owner_client.get(f"/assemblies/{big.id}/?item={counted['item_id']}").content.decode()
    assert _region(body, '<dd class="tokens">', "</dd>").startswith(f"{counted['tokens']}")
