"""Two runs compared step by step on /compare/ (`?by=step&run=&run_b=`): step N of A beside step N
of B, the changed items each a link to that step's inspector on the item, a step only one run has
marked, and the whole comparison as CSV and JSON. The expected changes are read from the two
steps' sealed manifest documents, not from the item rows the page reads."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import timedelta

import pytest

from manifests.examples import example_json
from manifests.models import AssemblyJob, JobStatus, Manifest
from manifests.selectors import manifest_document

from .long_run import long_run


@pytest.fixture
def two_runs(example):
    """run-x: ready, blocked, ready, blocked, ready; run-y: four ready steps."""
    run_x = long_run([example["ready"], example["blocked"]], steps=5, run_id="run-x", block=1)
    run_y = long_run([example["ready"]], steps=4, run_id="run-y", block=1)
    return run_x, run_y


def _decisions(job) -> dict[str, tuple[str, str]]:
    document = manifest_document(Manifest.objects.get(job=job), sections=("included", "excluded"))
    found = {r["item_id"]: ("included", r["admission_reason"]) for r in document["included"]}
    return found | {r["item_id"]: ("excluded", r["reason"]) for r in document["excluded"]}


def _changed(job_a, job_b) -> set[str]:
    a, b = _decisions(job_a), _decisions(job_b)
    return {item_id for item_id in a.keys() | b.keys() if a.get(item_id) != b.get(item_id)}


def _row(body: str, number: int) -> str:
    return re.search(rf'<tr id="aligned-{number}"[^>]*>(.*?)</tr>', body, re.S).group(1)


def test_two_runs_line_up_by_step_with_each_change_linked_to_its_inspector(owner_client, two_runs):
    run_x, run_y = two_runs
    body = owner_client.get("/compare/", {"by": "step", "run": "run-x", "run_b": "run-y"}).content.decode()
    summary = re.sub(r"<[^>]+>", "", re.search(r'<p class="aligned-summary">(.*?)</p>', body, re.S).group(1))
    assert summary == ("5 steps lined up by number: 4 paired, 2 with changes (2 changed status), 1 only in A, "
                       "0 only in B.")
    for number in (1, 3):
        assert "unchanged" in _row(body, number)
    expected = _changed(run_x[1], run_y[1])
    assert expected  # a blocked step against a ready one differs
    second = html.unescape(_row(body, 2))
    assert "status blocked → ready" in second
    linked = set(re.findall(r'<a href="/assemblies/[^/]+/\?item=([^"]+)"', second))
    assert linked == set(list(sorted(expected))[:8])
    a_only = {i for i in expected if i not in _decisions(run_y[1])}
    for item_id in linked:
        side = run_x[1] if item_id in a_only else run_y[1]
        assert f'<a href="/assemblies/{side.id}/?item={item_id}"' in second
    assert "only in A" in _row(body, 5) and "no step 5 in B" in _row(body, 5)


def test_the_comparison_exports_every_change_as_csv_and_json(owner_client, two_runs):
    run_x, run_y = two_runs
    query = {"run": "run-x", "run_b": "run-y"}
    response = owner_client.get("/compare/export.csv", query)
    assert response["Content-Disposition"] == 'attachment; filename="compare-run-x-run-y.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    by_step: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row)
    assert [r["change"] for r in by_step["1"]] == ["unchanged"] and [r["change"] for r in by_step["3"]] == ["unchanged"]
    for number in (2, 4):
        expected = _changed(run_x[number - 1], run_y[number - 1])
        assert {r["item_id"] for r in by_step[str(number)]} == expected
        assert {(r["status_a"], r["status_b"]) for r in by_step[str(number)]} == {("blocked", "ready")}
    assert [(r["change"], r["assembly_a"], r["assembly_b"]) for r in by_step["5"]] == [("step_only_a", str(run_x[4].id), "")]
    document = json.loads(b"".join(owner_client.get("/compare/export.json", query).streaming_content))
    assert document["run_a"] == "run-x" and document["run_b"] == "run-y"
    assert [(r["step"], r["item_id"] or "", r["change"]) for r in document["rows"]] == [
        (int(r["step"]), r["item_id"], r["change"]) for r in rows]


def test_a_missing_run_is_named_and_a_bad_export_refused(owner_client, two_runs):
    missing = owner_client.get("/compare/", {"by": "step", "run": "run-x", "run_b": "run-nope"})
    problems = html.unescape(missing.content.decode())
    assert missing.status_code == 404 and "B: no run “run-nope” in your tenants." in problems and "A: no run" not in problems
    empty = owner_client.get("/compare/", {"by": "step"})
    assert empty.status_code == 200 and "A: give the run to compare step by step" in empty.content.decode()
    assert owner_client.get("/compare/export.csv").status_code == 400
    assert owner_client.get("/compare/export.xml", {"run": "run-x"}).status_code == 404


def test_the_form_offers_the_tenants_runs_and_another_tenant_finds_none(client, example, two_runs):
    client.force_login(example["owner"])
    body = client.get("/compare/").content.decode()
    options = re.findall(r'<option value="([^"]+)"></option>', re.search(r'<datalist id="recent-runs">(.*?)</datalist>', body, re.S).group(1))
    assert {"run-x", "run-y", "run-42"} <= set(options)
    assert '<button type="submit" name="by" value="step">' in body
    client.force_login(example["outsider"])
    assert "run-x" not in client.get("/compare/").content.decode()
    assert client.get("/compare/", {"by": "step", "run": "run-x", "run_b": "run-y"}).status_code == 404
    assert client.get("/compare/export.csv", {"run": "run-x", "run_b": "run-y"}).status_code == 404


def test_a_step_not_sealed_yet_compares_its_status_and_no_items(owner_client, two_runs):
    run_x, run_y = two_runs
    last = run_y[-1]
    queued = AssemblyJob.objects.create(tenant=last.tenant, run=last.run, step_id="step-5", request_packed=last.request_packed,
                                        request_digest=last.request_digest, policy_revision=last.policy_revision,
                                        status=JobStatus.QUEUED, submitted_by=last.submitted_by)
    AssemblyJob.objects.filter(pk=queued.pk).update(created_at=last.created_at + timedelta(seconds=1))  # the fifth step
    body = html.unescape(owner_client.get("/compare/", {"by": "step", "run": "run-x", "run_b": "run-y"}).content.decode())
    fifth = _row(body, 5)
    assert "status ready → queued" in fifth and "?item=" not in fifth


def test_each_runs_policy_revision_is_named_on_the_page_and_in_the_exports(owner_client, example, two_runs):
    from policies.services import policy_revision_publish

    from .conftest import run_job

    published = policy_revision_publish(revision=example["draft"], user=example["owner"], note="floor 0.9")
    assert published.revision == 4
    request = example_json("request.json")
    request["run_id"], request["step_id"], request["policy"]["revision"] = "run-r4", "step-1", 4
    run_job(example["owner"], request, "under-r4")
    body = owner_client.get("/compare/", {"by": "step", "run": "run-x", "run_b": "run-r4"}).content.decode()
    policies = re.sub(r"<[^>]+>", "", re.search(r'<p class="aligned-policies">(.*?)</p>', body, re.S).group(1))
    assert policies == "Policy: A ran under source-research r3, B under source-research r4."
    assert "r3</span>" in _row(body, 1) and "r4</span>" in _row(body, 1)
    response = owner_client.get("/compare/export.csv", {"run": "run-x", "run_b": "run-r4"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {(row["step"], row["policy_a"], row["policy_b"]) for row in rows if row["step"] == "1"} == {
        ("1", "source-research r3", "source-research r4")}
    assert {row["policy_a"] for row in rows} == {"source-research r3"}
    document = json.loads(b"".join(owner_client.get("/compare/export.json", {"run": "run-x", "run_b": "run-r4"}).streaming_content))
    assert (document["policies_a"], document["policies_b"]) == (["source-research r3"], ["source-research r4"])


def test_a_compared_items_decision_keeps_its_source_on_both_sides():
    # Written for a survivor of seed 349366 (docs/mutation.md): the compare page names an item by
    # its source (item_label: label, kind, source_ref), included or excluded, flipped or one-sided.
    from manifests.dashboard_selectors import compare_sections

    ref = {"path": "src/app.py", "lines": "1-40"}
    a = {"included": [{"item_id": "f", "admission_reason": "ranked", "partition": "code", "tokens": 9, "kind": "code", "source_ref": ref},
                      {"item_id": "gone", "admission_reason": "ranked", "partition": "code", "tokens": 3, "kind": "code",
                       "source_ref": {"path": "old.py"}}],
         "excluded": []}
    b = {"included": [], "excluded": [{"item_id": "f", "reason": "budget", "partition": "code", "tokens": 9, "kind": "code",
                                       "source_ref": ref}]}
    compared = compare_sections(a, b)
    [flip] = compared["flips"]
    assert flip["before"]["source_ref"] == flip["after"]["source_ref"] == ref
    assert compared["only_a"] == [{"item_id": "gone", "decision": "included", "reason": "ranked", "partition": "code",
                                   "tokens": 3, "kind": "code", "source_ref": {"path": "old.py"}}]
