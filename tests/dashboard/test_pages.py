"""Every dashboard page, as seen by an owner, a reviewer and an outsider (who gets 404)."""

from __future__ import annotations

import copy
import html
import re

import pytest

from manifests.examples import example_json
from manifests.models import Manifest
from manifests.selectors import manifest_document, manifest_payload
from manifests.services import manifest_create
from policies.models import PolicyRevision, RevisionStatus
from tests.golden import load_example

from .conftest import run_job


def pages(example):
    ready, blocked = example["ready"], example["blocked"]
    return [
        "/",
        "/runs/",
        "/runs/run-42/",
        f"/assemblies/{ready.id}/",
        f"/assemblies/{ready.id}/?item=summary-checkpoint-19",
        f"/assemblies/{ready.id}/?q=plan&group=partition",
        f"/assemblies/{ready.id}/input/",
        f"/assemblies/{ready.id}/included/?page=1",
        f"/assemblies/{ready.id}/excluded/?page=1&reason=stale_revision",
        f"/assemblies/{ready.id}/transforms/",
        f"/assemblies/{ready.id}/tool_pairs/",
        f"/assemblies/{ready.id}/item/?item_id=plan-42-r4",
        f"/assemblies/{blocked.id}/",
        "/why/?q=plan-42-r4",
        f"/compare/?a={ready.id}&b={blocked.id}",
        "/policies/",
        "/policies/source-research/",
        "/policies/source-research/revisions/3/edit/",
        "/policies/source-research/diff/?from=3&to=4",
        "/policies/source-research/revisions/4/impact/",
    ]


def test_it_requires_login(client, example):
    for url in pages(example):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_it_shows_every_page_to_a_member(reviewer_client, example):
    for url in pages(example):  # the old included/excluded tables redirect to the inspector's list
        assert reviewer_client.get(url, follow=True).status_code == 200, url


def test_it_hides_another_tenants_objects_from_an_outsider(outsider_client, example):
    for url in pages(example):
        if url in ("/", "/runs/", "/policies/") or url.startswith("/why/"):
            continue
        assert outsider_client.get(url).status_code == 404, url


def test_it_lists_nothing_of_another_tenant_for_an_outsider(outsider_client, example):
    assert b"run-42" not in outsider_client.get("/runs/").content
    assert b"source-research" not in outsider_client.get("/policies/").content
    assert b"0 decisions" in outsider_client.get("/why/?q=plan-42-r4").content
    assert b"run-42" not in outsider_client.get("/").content


def test_the_login_page_logs_a_user_in(client, example):
    response = client.post("/login/", {"username": "reviewer", "password": "correct horse battery"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_the_home_page_lists_recent_runs_and_blocked_assemblies(owner_client, example):
    body = owner_client.get("/").content.decode()
    assert "run-42" in body
    # The blocked assembly's own row names the reason the worked example's golden file gives it.
    blocked_section = body.split("<h2>Blocked assemblies</h2>")[1]
    row = next(r for r in blocked_section.split("<tr>") if str(example["blocked"].id)[:12] in r)
    assert load_example("expected-blocked.json")["blocked_reason"] == "required_partition_missing"
    assert '<span class="badge bad">required_partition_missing</span>' in row
    # The ready assembly is not listed among the blocked ones.
    assert str(example["ready"].id)[:12] not in blocked_section


def test_the_runs_list_filters_by_status_policy_and_date(owner_client, example):
    assert "run-42" in owner_client.get("/runs/?status=blocked").content.decode()
    assert "run-42" not in owner_client.get("/runs/?status=failed").content.decode()
    assert "run-42" in owner_client.get("/runs/?policy=source-research").content.decode()
    assert "run-42" not in owner_client.get("/runs/?policy=other").content.decode()
    assert "run-42" not in owner_client.get("/runs/?until=2000-01-01").content.decode()


def test_a_runs_timeline_shows_each_attempt_with_tokens_and_revision(owner_client, example):
    body = owner_client.get("/runs/run-42/").content.decode()
    assert body.count('<tr class="step-row ') == 3
    assert re.search(r">\d+ / 13000<", body)
    assert ">source-research r3<" in body
    assert "compare with the step before" in body


def test_the_manifest_page_shows_every_section_side_by_side(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/").content.decode()
    for text in ("assembly_input_hash", "tiktoken/o200k_base", "openai_chat", "response reserve",
                 "protocol overhead", "safety margin", "direct_evidence", "stale_revision", "not_retrieved",
                 "retrieval_failed", "evidence-pi-transform-context-raw", "stable prefix", "cache-eligible"):
        assert text in body, text
    # the transforms and tool pairs load as their own regions
    transforms = owner_client.get(f"/assemblies/{example['ready'].id}/transforms/").content.decode()
    assert "transform-result-call-c-excerpt" in transforms and "failure_lines_kept" in transforms
    tool_pairs = owner_client.get(f"/assemblies/{example['ready'].id}/tool_pairs/").content.decode()
    assert "call-c" in tool_pairs and "diagnostic_only" in tool_pairs
    # The stable prefix row names the stable-prefix items: the request's system_policy candidates.
    stable = [c["item_id"] for c in example_json("request.json")["candidates"] if c["source_type"] == "system_policy"]
    assert stable
    cache_row = body.split("<dt>stable prefix</dt>")[1].split("</dd>")[0]
    for item_id in stable:
        assert f"<code>{item_id}</code>" in cache_row, item_id
    # acquisition outcomes are counted apart and listed as source requests, never as excluded items
    items = body.split('id="items"')[1].split('id="inspector"')[0]
    assert "not_retrieved" not in items and "retrieval_failed" not in items
    # an item's admission reason and the gate that failed are in its inspector
    included = owner_client.get(f"/assemblies/{example['ready'].id}/?item=evidence-pi-transform-context").content.decode()
    assert "supports_current_decision_evidence" in included.split('id="inspector"')[1]
    excluded = owner_client.get(f"/assemblies/{example['ready'].id}/?item=plan-42-r4").content.decode()
    assert "required_revision" in excluded.split('id="inspector"')[1]


def test_the_manifest_page_of_a_blocked_assembly_shows_the_reason_and_missing_parts(owner_client, example):
    assembly = manifest_document(Manifest.objects.get(job=example["blocked"]))["assembly"]
    body = owner_client.get(f"/assemblies/{example['blocked'].id}/").content.decode()
    assert assembly["blocked_reason"] in body
    for part in assembly["missing"]:
        assert part in body
    assert "No model input was produced" in body


def test_the_serialized_input_marks_untrusted_blocks(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/input/").content.decode()
    assert "untrusted-block" in body
    assert "badge role\">system" in body


def test_an_item_body_loads_on_demand(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/item/?item_id=evidence-pi-transform-context").content.decode()
    submitted = next(c for c in example_json("request.json")["candidates"] if c["item_id"] == "evidence-pi-transform-context")
    assert "Submitted content" in body and html.escape(submitted["content"].splitlines()[0]) in body
    assert "own source" not in owner_client.get(f"/assemblies/{example['ready'].id}/item/?item_id=summary-checkpoint-19").content.decode()


def test_why_excluded_links_each_hit_to_its_manifest_row(owner_client, example):
    body = owner_client.get("/why/?q=plan-42-r4").content.decode()
    assert f"/assemblies/{example['ready'].id}/?item=plan-42-r4\"" in body  # the inspector opens on it
    assert "stale_revision" in body
    by_ref = owner_client.get("/why/?q=agent-rules.md").content.decode()
    assert "notes-as-control" in by_ref
    by_reason = owner_client.get("/why/?reason=hard_gate_rejected").content.decode()
    assert "trace-old-1" in by_reason and "?item=plan-42-r4" not in by_reason  # traces fail the trust gate


def test_compare_shows_flips_partitions_and_status_change(owner_client, example):
    body = owner_client.get(f"/compare/?a={example['ready'].id}&b={example['blocked'].id}").content.decode()
    assert "Status changed: ready → blocked" in body
    assert "Partitions" in body and "background" in body


def test_the_policy_history_shows_who_published_and_the_note(owner_client, example):
    body = owner_client.get("/policies/source-research/").content.decode()
    assert "worked example" in body and "owner" in body and example["published"].digest[:19] in body


def test_the_diff_page_reuses_the_structural_diff(owner_client, example):
    body = owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode()
    assert "budget.partitions.background.maximum" in body and "1500" in body and "1000" in body


def test_the_impact_preview_replays_recorded_requests_under_the_draft(owner_client, example,
                                                                      django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # a job, run in-process on commit
        owner_client.post("/policies/source-research/revisions/4/impact/run/")
    body = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert "web-context7-overview" in body  # below the draft's relevance floor
    assert "would flip" in body and "ranking_lost" in body
    assert "Publish revision 4" in body


def test_the_editor_shows_each_validation_error_at_its_field(owner_client, example):
    draft = example["draft"]
    page = owner_client.get("/policies/source-research/revisions/4/edit/").content.decode()
    text = page.split('name="body"')[1].split(">", 1)[1].split("</textarea>")[0]
    import html

    broken = html.unescape(text).replace("maximum: 1000", "maximum: -5", 1).replace("minimum: 1500", "minimum: lots", 1)
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": broken, "action": "save"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "budget.partitions.state.minimum" in body
    assert "line " in body
    draft.refresh_from_db()
    assert draft.body["budget"]["partitions"]["background"]["maximum"] == 1000


def test_the_editor_saves_a_valid_draft(owner_client, example):
    import html

    page = owner_client.get("/policies/source-research/revisions/4/edit/").content.decode()
    text = html.unescape(page.split('name="body"')[1].split(">", 1)[1].split("</textarea>")[0])
    response = owner_client.post("/policies/source-research/revisions/4/edit/",
                                 {"body": text.replace("maximum: 1000", "maximum: 1200", 1), "action": "save"})
    assert response.status_code == 200 and "Saved." in response.content.decode()
    assert PolicyRevision.objects.get(pk=example["draft"].pk).body["budget"]["partitions"]["background"]["maximum"] == 1200


def test_an_editor_publishes_a_draft_with_a_note(owner_client, example):
    response = owner_client.post("/policies/source-research/revisions/4/publish/", {"note": "smaller background"})
    assert response.status_code == 302
    draft = PolicyRevision.objects.get(pk=example["draft"].pk)
    assert draft.status == RevisionStatus.PUBLISHED and draft.publish_note == "smaller background"
    assert PolicyRevision.objects.get(pk=example["published"].pk).status == RevisionStatus.RETIRED


def test_publishing_without_a_note_is_refused(owner_client, example):
    response = owner_client.post("/policies/source-research/revisions/4/publish/", {"note": "  "})
    assert response.status_code == 400
    assert PolicyRevision.objects.get(pk=example["draft"].pk).status == RevisionStatus.DRAFT


def test_a_reviewer_cannot_publish_or_edit(reviewer_client, example):
    assert reviewer_client.post("/policies/source-research/revisions/4/publish/", {"note": "x"}).status_code == 403
    assert reviewer_client.post("/policies/source-research/revisions/4/edit/", {"body": "x: 1"}).status_code == 403
    assert reviewer_client.post("/policies/source-research/revisions/new/").status_code == 403
    assert PolicyRevision.objects.get(pk=example["draft"].pk).status == RevisionStatus.DRAFT
    assert PolicyRevision.objects.filter(policy=example["draft"].policy).count() == 2
    assert "Publish revision 4" not in reviewer_client.get("/policies/source-research/revisions/4/impact/").content.decode()


def test_an_outsider_cannot_publish(outsider_client, example):
    assert outsider_client.post("/policies/source-research/revisions/4/publish/", {"note": "x"}).status_code == 404
    assert PolicyRevision.objects.get(pk=example["draft"].pk).status == RevisionStatus.DRAFT


def test_an_editor_starts_a_new_draft(owner_client, example):
    response = owner_client.post("/policies/source-research/revisions/new/")
    assert response.status_code == 302 and response["Location"].endswith("/revisions/5/edit/")


def test_the_tenant_switcher_only_offers_the_users_tenants(owner_client, example):
    assert owner_client.post("/tenant/", {"tenant": "tenant-o"}).status_code == 404
    assert owner_client.post("/tenant/", {"tenant": "tenant-x", "next": "https://evil.example/"})["Location"] == "/"


@pytest.mark.parametrize("url_name", ["manifest", "item", "input", "why", "compare", "included"])
def test_untrusted_content_is_shown_escaped(owner_client, example, url_name):
    job = example["hostile"]
    url = {
        "manifest": f"/assemblies/{job.id}/",
        "item": f"/assemblies/{job.id}/item/?item_id=plan-42-r5",
        "input": f"/assemblies/{job.id}/input/",
        "why": "/why/?q=onerror&decision=",
        "compare": f"/compare/?a={example['ready'].id}&b={job.id}",
        "included": f"/assemblies/{job.id}/included/",
    }[url_name]
    body = owner_client.get(url).content.decode()
    assert "<script>alert" not in body
    assert "<img src=x onerror" not in body
    if url_name in ("item", "input"):
        assert "&lt;script&gt;alert(" in body
    if url_name == "why":
        assert "&lt;img src=x onerror" in body


def test_a_manifest_with_10000_items_renders_one_page_in_few_queries(owner_client, example, django_assert_max_num_queries):
    job = example["ready"]
    sealed = Manifest.objects.get(job=job)
    document = copy.deepcopy(manifest_document(sealed))
    first_included, first_excluded = document["included"][0], document["excluded"][0]
    document["included"] = [{**first_included, "item_id": f"inc-{i}"} for i in range(5000)]
    document["excluded"] = [{**first_excluded, "item_id": f"exc-{i}"} for i in range(5000)]
    document["assembly"]["id"] = "assembly-big"
    big_job = type(job).objects.create(tenant=job.tenant, run=job.run, step_id="step-big", request_packed=job.request_packed,
                                       request_digest="x", policy_revision=job.policy_revision, status="ready")
    manifest_create(job=big_job, document=document, payload=manifest_payload(sealed))
    with django_assert_max_num_queries(10):
        response = owner_client.get(f"/assemblies/{big_job.id}/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "inc-49<" in body and "inc-50<" not in body
    assert "page 1 of 200" in body
    with django_assert_max_num_queries(10):
        second = owner_client.get(f"/assemblies/{big_job.id}/?page=2").content.decode()
    assert "inc-50<" in second and "inc-49<" not in second
    with django_assert_max_num_queries(10):
        focused = owner_client.get(f"/assemblies/{big_job.id}/?item=exc-4321").content.decode()
    assert "exc-4321<" in focused.split('id="items"')[1].split('id="inspector"')[0]
    assert 'id="inspector"' in focused and "exc-4321" in focused.split('id="inspector"')[1]


def test_the_manifest_page_shows_the_output_checks_and_the_lifecycle_events_escaped(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/").content.decode()
    assert "instruction_data_boundary: passed" in body and "result_status: passed" in body
    request = example_json("request.json")
    request["step_id"] = "step-21"
    request["lifecycle_events"] = [{"event": "source_expired", "item_id": "web-context7-overview",
                                    "detail": "<script>alert('event')</script>"}]
    job = run_job(example["owner"], request, "with-event")
    page = owner_client.get(f"/assemblies/{job.id}/").content.decode()
    assert "lifecycle events" in page and "<code>source_expired</code> (agent)" in page
    assert "<script>alert('event')</script>" not in page and "&lt;script&gt;alert(&#x27;event&#x27;)" in page
