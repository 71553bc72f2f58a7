"""User turns labelled by their first words on the pages that list many items (issue 52 §4): the
run's item × step matrix and the inspector's list show the label each decision stored at seal,
so a user's correction stands out among the other user turns, without reading any request (their
query counts stay the same). The expected labels are written by hand from the words the test
submits; a purge of the content takes the words away from the pages too."""

from __future__ import annotations

import html
import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json
from manifests.item_labels import BIDI_CONTROLS
from manifests.models import AssemblyJob, ItemDecision, Manifest
from manifests.services import manifest_purge_content

from .conftest import run_job

TURNS = ["Please add a retry section to the deployment guide before Friday's release",
         "Correction: use the staging database",
         "Thanks, that looks right now"]
SHOWN = ["user: “Please add a retry section to the deployment guide before…”",  # ten words at most
         "user: “Correction: use the staging database”",
         "user: “Thanks, that looks right now”"]


def _step(example, *, run_id: str, number: int, turns: list[str]) -> AssemblyJob:
    """Step `number` of `run_id`: the worked example's request with `turns` as the user's turns
    (`user-1`, `user-2`, …, goals the task partition admits)."""
    request = example_json("request.json")
    request["run_id"], request["step_id"] = run_id, f"step-{number}"
    goal = next(c for c in request["candidates"] if c["item_id"] == "task-goal")
    for index, words in enumerate(turns, start=1):
        request["candidates"].append({**goal, "item_id": f"user-{index}", "source_ref": {"object_id": f"user-{index}"},
                                      "content": words, "content_hash": sha256_text(words),
                                      "turn": {"index": index, "speaker": "user"}})
    return run_job(example["owner"], request, f"{run_id}/{number}")


def _labels(body: str) -> dict[str, str]:
    """item_id -> the label shown beside it (the matrix's row heads, the inspector's rows)."""
    found = re.findall(r'<code>(user-\d)</code>(?:</a>)?<div class="item-label">([^<]*)</div>', body)
    return {item_id: html.unescape(label) for item_id, label in found}


def test_the_matrix_shows_each_user_turn_by_its_first_words(owner_client, example):
    # the turns arrive one a step: step 2 brings the correction
    for number in (1, 2, 3):
        _step(example, run_id="run-turns", number=number, turns=TURNS[:number])
    body = owner_client.get("/runs/run-turns/matrix/", {"q": "user-"}).content.decode()
    assert _labels(body) == {"user-1": SHOWN[0], "user-2": SHOWN[1], "user-3": SHOWN[2]}


def test_the_inspectors_list_shows_each_user_turn_by_its_first_words(owner_client, example):
    job = _step(example, run_id="run-turns", number=1, turns=TURNS)
    body = owner_client.get(f"/assemblies/{job.id}/", {"q": "user-"}).content.decode()
    assert _labels(body) == {"user-1": SHOWN[0], "user-2": SHOWN[1], "user-3": SHOWN[2]}


def test_the_labels_cost_the_matrix_and_the_list_no_query(owner_client, example):
    # one step of one turn against three steps of three turns: the pages read no request
    one = _step(example, run_id="run-one", number=1, turns=TURNS[:1])
    for number in (1, 2, 3):
        three = _step(example, run_id="run-three", number=number, turns=TURNS)
    counts = {}
    for name, job in (("one", one), ("three", three)):
        with CaptureQueriesContext(connection) as matrix:
            matrix_body = owner_client.get(f"/runs/run-{name}/matrix/", {"q": "user-"}).content.decode()
        with CaptureQueriesContext(connection) as listed:
            list_body = owner_client.get(f"/assemblies/{job.id}/", {"q": "user-"}).content.decode()
        assert SHOWN[0] in html.unescape(matrix_body) and SHOWN[0] in html.unescape(list_body)
        counts[name] = (len(matrix.captured_queries), len(listed.captured_queries))
    assert counts["three"] == counts["one"]


def test_a_hostile_turn_is_escaped_and_its_bidi_controls_neutralised(owner_client, example):
    words = "<script>alert(1)</script> see \u202etxt.exe and \u2066more\u2069"
    job = _step(example, run_id="run-hostile", number=1, turns=[words])
    for page in ("/runs/run-hostile/matrix/", f"/assemblies/{job.id}/"):
        body = owner_client.get(page, {"q": "user-"}).content.decode()
        assert "<script>alert" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body, page
        assert not any(control in body for control in BIDI_CONTROLS), page
        assert _labels(body) == {"user-1": "user: “<script>alert(1)</script> see �txt.exe and �more�”"}, page


def test_a_decision_stored_without_a_label_shows_what_its_source_ref_names(owner_client, example):
    # a decision sealed before the label was stored (migration 0011) keeps the page as it was
    job = _step(example, run_id="run-old", number=1, turns=TURNS[:2])
    ItemDecision.objects.filter(tenant=job.tenant, item_id="user-2").update(label="")
    for page in ("/runs/run-old/matrix/", f"/assemblies/{job.id}/"):
        body = owner_client.get(page, {"q": "user-"}).content.decode()
        assert _labels(body) == {"user-1": SHOWN[0], "user-2": "goal"}, page


def test_a_later_step_repeating_the_turn_labels_a_decision_stored_without_one(owner_client, example):
    first = _step(example, run_id="run-old", number=1, turns=TURNS[:2])
    assert ItemDecision.objects.filter(tenant=first.tenant, item_id__startswith="user-").update(label="") == 2
    second = _step(example, run_id="run-old", number=2, turns=TURNS[:2])  # the same two decisions, reused
    assert ItemDecision.objects.filter(tenant=first.tenant, item_id__startswith="user-").count() == 2
    for page in ("/runs/run-old/matrix/", f"/assemblies/{first.id}/", f"/assemblies/{second.id}/"):
        assert _labels(owner_client.get(page, {"q": "user-"}).content.decode()) == {"user-1": SHOWN[0], "user-2": SHOWN[1]}, page


def test_a_content_purge_takes_the_words_out_of_the_labels(owner_client, example):
    kept = _step(example, run_id="run-purged", number=1, turns=TURNS[:2])
    purged = _step(example, run_id="run-purged", number=2, turns=TURNS[:2])
    manifest_purge_content(manifest=Manifest.objects.get(job=purged))
    # still used by the unpurged step 1: the words stay while its content does
    assert _labels(owner_client.get(f"/assemblies/{kept.id}/", {"q": "user-"}).content.decode())["user-2"] == SHOWN[1]
    manifest_purge_content(manifest=Manifest.objects.get(job=kept))
    for page in ("/runs/run-purged/matrix/", f"/assemblies/{purged.id}/"):
        body = owner_client.get(page, {"q": "user-"}).content.decode()
        assert "staging database" not in body, page
        assert _labels(body) == {"user-1": "goal", "user-2": "goal"}, page


def test_another_tenants_turns_lend_no_label(outsider_client, example):
    _step(example, run_id="run-turns", number=1, turns=TURNS)
    assert outsider_client.get("/runs/run-turns/matrix/").status_code == 404
