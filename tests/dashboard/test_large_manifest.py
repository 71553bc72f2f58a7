"""The manifest page of a manifest the service sealed reads `sections` and one page of item rows.

Its queries never touch the sealed document, so its cost does not grow with the item count; the
page shows what the document-reading page showed, and the 0004 backfill gives a manifest sealed
before `sections` existed the same page.
"""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.db.models import QuerySet

from bench import workload
from manifests.models import Manifest, ManifestItem

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
    """Make the manifest look sealed before 0004 (Manifest's own queryset refuses bulk updates)."""
    QuerySet(model=Manifest).filter(job=job).update(sections=None)
    ManifestItem.objects.filter(manifest__job=job).update(record=None)


def test_sealing_stores_the_page_sections_and_each_items_record(big):
    manifest = Manifest.objects.get(job=big)
    assert manifest.sections["included_total"] == len(manifest.document["included"])
    assert manifest.sections["excluded_total"] == len(manifest.document["excluded"])
    assert all("before_excerpt" not in t for t in manifest.sections["transforms"])
    first = ManifestItem.objects.filter(manifest=manifest, decision="excluded").order_by("id").first()
    assert first.record == manifest.document["excluded"][0]


def test_the_page_of_a_big_manifest_never_reads_its_document(owner_client, big, django_assert_max_num_queries):
    with django_assert_max_num_queries(10) as captured:
        body = owner_client.get(f"/assemblies/{big.id}/").content.decode()
    assert not any('"document"' in query["sql"] for query in captured.captured_queries)
    total = Manifest.objects.get(job=big).sections["excluded_total"]
    assert f"of {total}" in body
    assert "Loading the before/after excerpts" in body


def test_the_page_focuses_an_item_on_a_later_page(owner_client, big):
    manifest = Manifest.objects.get(job=big)
    last = manifest.document["excluded"][-1]["item_id"]
    body = owner_client.get(f"/assemblies/{big.id}/?item={last}").content.decode()
    assert f"<code>{last}</code>" in body and 'class="focus"' in body


def test_the_page_shows_what_the_document_shows(owner_client, big):
    url = f"/assemblies/{big.id}/?excluded_page=3"
    from_sections = owner_client.get(url).content.decode()
    _forget_sections(big)
    from_document = owner_client.get(url).content.decode()
    for start, end in (('id="header"', 'id="budget"'), ('id="included"', 'id="excluded"'),
                       ('id="excluded"', 'id="acquisition"'), ('id="acquisition"', 'id="transforms"'),
                       ('id="tool-pairs"', 'id="serialized-input"')):
        assert _region(from_sections, start, end) == _region(from_document, start, end), start


def test_the_transform_excerpts_load_on_demand(owner_client, big):
    manifest = Manifest.objects.get(job=big)
    excerpt = next(t["after_excerpt"] for t in manifest.document["transforms"] if t.get("after_excerpt"))
    body = owner_client.get(f"/assemblies/{big.id}/transforms/?page=1").content.decode()
    assert excerpt.splitlines()[0][:40] in body.replace("&#x27;", "'").replace("&quot;", '"')


def test_the_backfill_gives_an_older_manifest_the_same_page(owner_client, big):
    url = f"/assemblies/{big.id}/?excluded_page=2&reason=budget_evicted"
    before = _page(owner_client, url)
    _forget_sections(big)
    migration = importlib.import_module("manifests.migrations.0004_manifest_sections_item_record")
    migration.backfill(apps, None)
    assert Manifest.objects.get(job=big).sections is not None
    assert _page(owner_client, url) == before


def test_the_backfill_leaves_a_manifest_without_item_rows_to_the_document(example):
    job = example["ready"]
    ManifestItem.objects.filter(manifest__job=job).delete()
    _forget_sections(job)
    migration = importlib.import_module("manifests.migrations.0004_manifest_sections_item_record")
    migration.backfill(apps, None)
    assert Manifest.objects.get(job=job).sections is None
