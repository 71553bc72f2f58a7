"""The manifest inspector without a browser: the selected item's story, filters in the URL, bad
values, escaping, the payload view's links, and the old table URLs redirecting to the list.

Expected values come from the worked example's request and golden file (what was submitted and
what the engine must decide), not from the page under test.
"""

from __future__ import annotations

import html
import re

import pytest

from manifests.examples import example_json
from manifests.models import Manifest
from manifests.selectors import manifest_document

from .conftest import XSS_CONTENT, XSS_REF


def _get(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def _region(body: str, start: str, end: str) -> str:
    return body.split(start, 1)[1].split(end, 1)[0]


def _inspector(body: str) -> str:
    return _region(body, 'id="inspector"', 'id="header"')


def _listed(body: str) -> list[str]:
    """The item ids the list shows, in order."""
    return re.findall(r'<td class="item-cell"><a [^>]*><code>([^<]+)</code>', _region(body, 'id="items"', 'id="inspector"'))


def _candidate(item_id: str, name: str = "request.json") -> dict:
    return next(c for c in example_json(name)["candidates"] if c["item_id"] == item_id)


def test_a_summarys_lineage_lists_its_input_turns_instead_of_calling_it_its_own_source(owner_client, example):
    body = _inspector(_get(owner_client, f"/assemblies/{example['ready'].id}/?item=summary-checkpoint-19"))
    for turn in _candidate("summary-checkpoint-19")["input_item_ids"]:
        assert f'<code class="node-id">{turn}</code>' in body, turn
    assert "own source" not in body
    assert "not in this assembly" in body  # the turns were summarized before this step
    # every preservation assertion of the summary's verification, with its status
    for name in ("goal", "constraints", "open_items", "source_refs", "artifact_refs", "trust_not_raised"):
        assert re.search(rf'assertion-name">{name}</span> <span class="assertion-result">passed', body), name


def test_an_excluded_items_sentence_names_its_reason_the_failing_gate_and_the_refresh_condition(owner_client, example):
    body = html.unescape(_inspector(_get(owner_client, f"/assemblies/{example['ready'].id}/?item=plan-42-r4")))
    assert "Excluded as stale_revision" in re.sub(r"<[^>]+>", "", body)
    assert "required_revision ✗ failed" in re.sub(r"<[^>]+>", "", body)
    assert "load_required_revision_5" in body  # the task requires plan-42 revision 5; r4 is stale
    assert "no partition" in body and re.search(r'class="tokens">\d+', body)


def _text(body: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", body))


def test_an_included_item_shows_its_partition_share_and_its_place_in_the_payload(owner_client, example):
    job = example["ready"]
    body = _inspector(_get(owner_client, f"/assemblies/{job.id}/?item=result-call-a"))
    assert "Included in partition recent_tool_pairs" in _text(body)
    assert re.search(r"\d+% of the \d+ used in recent_tool_pairs", _text(body))
    assert "read_source" in _text(body)
    assert f'hx-get="/assemblies/{job.id}/item/?item_id=result-call-a&amp;part=payload"' in body
    # an OpenAI payload: system, user, the assistant turn of calls, then one tool message per result
    place = _text(_get(owner_client, f"/assemblies/{job.id}/item/?item_id=result-call-a&part=payload"))
    assert "message 4 (tool)" in place and "call in message 3 (assistant)" in place and "result in message 4" in place


def test_a_manifest_stored_without_item_rows_places_a_result_and_its_call_the_same(owner_client, example):
    """A manifest written before item rows (`sections` empty) is read from its document: the
    result's place names its call's message as when the rows exist."""
    from django.db.models.query import QuerySet

    job = example["ready"]
    url = f"/assemblies/{job.id}/item/?item_id=result-call-a&part=payload"
    with_rows = _text(_get(owner_client, url))
    QuerySet(model=Manifest).filter(job=job).update(sections=None)
    without = _text(_get(owner_client, url))
    assert "call in message 3 (assistant)" in with_rows and "result in message 4" in with_rows
    assert without == with_rows


def test_a_control_item_is_placed_in_the_system_message(owner_client, example):
    body = _get(owner_client, f"/assemblies/{example['ready'].id}/item/?item_id=policy-system&part=payload")
    assert "control text is the system message" in body


def test_an_excluded_item_has_no_place_in_the_payload(owner_client, example):
    body = _inspector(_get(owner_client, f"/assemblies/{example['ready'].id}/?item=plan-42-r4"))
    assert "Not in the payload (excluded)" in body and "part=payload" not in body
    assert owner_client.get(f"/assemblies/{example['ready'].id}/item/?item_id=plan-42-r4&part=payload").status_code == 404


@pytest.mark.parametrize("query,message", [
    ("decision=maybe", "Unknown decision"),
    ("reason=not_a_reason", "Unknown exclusion reason"),
    ("partition=attic", "no partition"),
    ("group=%3Cscript%3E", "Unknown grouping"),
    ("outcome=lost", "Unknown acquisition outcome"),
    ("item=no-such-item", "no item"),
    ("page=99999", None),
    ("q=" + "x" * 500, "cut to its first"),
])
def test_a_bad_filter_value_gets_a_visible_message_never_an_error(owner_client, example, query, message):
    body = _get(owner_client, f"/assemblies/{example['ready'].id}/?{query}")
    if message:
        assert message in _region(body, 'class="problems"', "</div>")
    assert "<script>" not in body


def test_filters_narrow_the_list_and_group_it(owner_client, example):
    url = f"/assemblies/{example['ready'].id}/"
    expected = example_json("expected.json")
    included = _listed(_get(owner_client, url + "?decision=included"))
    assert sorted(included) == sorted(expected["included"])
    stale = _listed(_get(owner_client, url + "?reason=stale_revision"))
    assert sorted(stale) == ["evidence-pi-old-commit", "plan-42-r4"]
    # search matches item ids, kinds, source ref text and reasons
    assert _listed(_get(owner_client, url + "?q=agent-rules.md")) == ["notes-as-control"]
    assert set(_listed(_get(owner_client, url + "?q=tool_result"))) == {"result-call-a", "result-call-b", "result-call-c"}
    assert sorted(_listed(_get(owner_client, url + "?q=permission_denied"))) == ["memory-other-tenant"]
    by_partition = _get(owner_client, url + "?group=partition&decision=included")
    groups = re.findall(r'<tr class="group"><th colspan="3"><span class="badge [a-z]+">([^<]+)</span>', by_partition)
    assert groups == sorted(set(groups)) and "recent_tool_pairs" in groups
    by_zone = _get(owner_client, url + "?group=zone")
    zones = re.findall(r'<tr class="group"><th colspan="3"><span class="badge [a-z]+">([^<]+)</span>', by_zone)
    assert zones[:4] == ["control", "task", "state", "untrusted_data"]


def test_counts_in_the_overview_link_to_the_filtered_list(owner_client, example):
    body = _region(_get(owner_client, f"/assemblies/{example['ready'].id}/"), 'id="overview"', 'id="items"')
    assert 'href="?reason=stale_revision"' in body and 'href="?decision=included"' in body
    assert 'href="?outcome=not_retrieved"' in body and 'href="?outcome=retrieval_failed"' in body
    sources = _get(owner_client, f"/assemblies/{example['ready'].id}/?outcome=retrieval_failed")
    failed = [r for r in example_json("request.json")["source_acquisition"] if r["outcome"] == "retrieval_failed"]
    assert failed and all(r["source_request_id"] in _region(sources, 'id="sources"', 'id="inspector"') for r in failed)


def test_the_old_table_urls_redirect_to_the_inspector_list(owner_client, example):
    job = example["ready"]
    response = owner_client.get(f"/assemblies/{job.id}/excluded/?page=1&reason=stale_revision")
    assert response.status_code == 302
    assert response["Location"] == f"/assemblies/{job.id}/?decision=excluded&reason=stale_revision&page=1"
    assert owner_client.get(f"/assemblies/{job.id}/included/")["Location"] == f"/assemblies/{job.id}/?decision=included"


def test_the_payload_view_links_each_block_to_its_item_and_marks_the_one_asked_for(owner_client, example):
    job = example["ready"]
    page = _get(owner_client, f"/assemblies/{job.id}/input/?item=result-call-a")
    assert "<h1>Payload of" in page and 'class="segment untrusted-block focus"' in page
    assert f'href="/assemblies/{job.id}/?item=result-call-a"' in page
    partial = owner_client.get(f"/assemblies/{job.id}/input/", headers={"HX-Request": "true"}).content.decode()
    assert "<h1>" not in partial and 'id="serialized-input-body"' in partial


def test_the_inspector_escapes_hostile_content_and_refs(owner_client, example):
    job = example["hostile"]
    for url in (f"/assemblies/{job.id}/?item=plan-42-r5", f"/assemblies/{job.id}/?q=onerror",
                f"/assemblies/{job.id}/input/?item=plan-42-r5", f"/assemblies/{job.id}/?q=%3Cscript%3E&item=%3Cimg%3E"):
        body = _get(owner_client, url)
        assert XSS_REF not in body and XSS_CONTENT not in body and "<script>alert" not in body, url
    assert "&lt;img src=x onerror" in _get(owner_client, f"/assemblies/{job.id}/?item=plan-42-r5")


def test_an_outsider_cannot_open_an_item(outsider_client, example):
    assert outsider_client.get(f"/assemblies/{example['ready'].id}/?item=plan-42-r4").status_code == 404
    assert outsider_client.get(f"/assemblies/{example['ready'].id}/input/?item=result-call-a").status_code == 404


def test_a_blocked_assembly_marks_no_partition_as_an_error_for_being_below_its_minimum(owner_client, example):
    manifest = Manifest.objects.get(job=example["blocked"])
    body = _region(_get(owner_client, f"/assemblies/{example['blocked'].id}/"), 'id="overview"', 'id="items"')
    below = [name for name, p in manifest_document(manifest)["budget"]["partitions"].items() if p["used"] < p["minimum"]]
    # information, not an error: a note, never a badge
    assert below and body.count('<span class="below-min-note"') == len(below) and "below min</span>" not in body
    assert "legend-bad" not in body  # blocked for a missing resident part, not for a partition


def test_a_blocked_assemblys_cache_prefix_reads_absent_not_none(owner_client, example):
    """A blocked manifest's cache record has no prefix identity (no payload was produced): the
    overview says so, where it would otherwise print a hash."""
    assert manifest_document(Manifest.objects.get(job=example["blocked"]))["cache"]["prefix_identity"] is None
    row = _get(owner_client, f"/assemblies/{example['blocked'].id}/").split("<dt>stable prefix</dt>", 1)[1].split("</dd>", 1)[0]
    assert "— (absent: no payload was produced)" in row and "None" not in row and "<code title=" not in row
    ready = _get(owner_client, f"/assemblies/{example['ready'].id}/").split("<dt>stable prefix</dt>", 1)[1].split("</dd>", 1)[0]
    assert '<code title="sha256:' in ready and "absent" not in ready


def _reread_request() -> dict:
    """The worked example with three more calls, in this order: a read of `notes/a.md` lines 1-3, a
    read of lines 1-5 showing the same three lines (the first read is a duplicate of it), and a read
    of `notes/b.md` that a later write of it makes stale."""
    import copy

    from ctxeng.engine.hashing import sha256_text

    data = copy.deepcopy(example_json("request.json"))
    template = _candidate("result-call-a")
    numbered = "".join(f"{n:>6}\tline {n} of a\n" for n in range(1, 6))

    def result(item_id: str, call_id: str, text: str, ref: dict) -> None:
        data["candidates"].append({**copy.deepcopy(template), "item_id": item_id, "call_id": call_id, "content": text,
                                   "content_hash": sha256_text(text), "source_ref": ref})
        data["tool_calls"].append({"call_id": call_id, "tool_name": "read_source", "arguments": {"path": ref["path"]},
                                   "status": "success", "result_item_id": item_id})

    result("result-dup-1", "dup-1", "".join(numbered.splitlines(keepends=True)[:3]), {"path": "notes/a.md", "lines": "1-3"})
    result("result-dup-2", "dup-2", numbered, {"path": "notes/a.md", "lines": "1-5"})
    result("result-old-b", "old-b", "b before\n", {"path": "notes/b.md"})
    result("result-write-b", "write-b", "wrote notes/b.md\n", {"path": "notes/b.md", "access": "write"})
    data["step_id"] = "step-rereads"
    return data


@pytest.fixture
def rereads(example):
    from .conftest import run_job

    return run_job(example["owner"], _reread_request(), "rereads")


def test_a_duplicate_reading_links_the_item_that_covers_it_with_both_ranges(owner_client, rereads):
    body = _inspector(_get(owner_client, f"/assemblies/{rereads.id}/?item=result-dup-1"))
    text = html.unescape(re.sub(r"<[^>]+>", "", body))
    assert "Excluded as duplicate" in text
    assert re.search(r'covered by <a href="[^"]*item=result-dup-2[^"]*"><code>result-dup-2</code></a>', body)
    assert "lines 1-5" in text and "lines 1-3" in text
    assert 'class="badge warn reason">duplicate' in body


def test_a_reading_made_stale_by_a_write_links_the_write(owner_client, rereads):
    body = _inspector(_get(owner_client, f"/assemblies/{rereads.id}/?item=result-old-b"))
    text = html.unescape(re.sub(r"<[^>]+>", "", body))
    assert "Excluded as stale_revision" in text
    assert re.search(r'made stale by a later write of the object by <a href="[^"]*item=result-write-b[^"]*">'
                     r'<code>result-write-b</code></a>', body)
    assert "any range" in text


@pytest.mark.parametrize(("detail", "words"), [
    ("stale: a write of notes/b.md (any range) by item 'w' (call 'c') after this item read the whole", "a later write of the object by"),
    ("stale: a reading of plan.md at revision 4 (item 'p4'); this item read revision 3", "a reading at a newer revision:"),
    ("stale: notes/a.md changed after this reading: a later reading (item 'r2', lines 1-5) shows line 2 differs",
     "a later reading that differs where they overlap:"),
    ("artifact_id 'plan-42' is at revision 4; task_spec requires 5", ""),
])
def test_the_stale_event_is_named_in_the_engines_words(detail, words):
    from manifests.views import stale_event

    assert stale_event(detail) == words
