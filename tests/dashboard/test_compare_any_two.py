"""Compare any two assemblies: by picking two columns of a run's timeline, or by run and step on
/compare/ (no ids to paste); a half-filled or wrong form answers the compare page with a message;
two submissions of one step id are told apart by attempt number and time."""

from __future__ import annotations

import re

import pytest

from manifests.examples import example_json
from manifests.models import AssemblyJob

from .conftest import run_job


def _problems(body: str) -> list[str]:
    found = re.search(r'<div class="problems" role="alert">(.*?)</div>', body, re.S)
    return re.findall(r"<p>(.*?)</p>", found.group(1)) if found else []


def _heads(body: str) -> tuple[str, str]:
    a = re.search(r'<p class="compare-a"><a href="/assemblies/([^/]+)/">', body).group(1)
    b = re.search(r'<p class="compare-b"><a href="/assemblies/([^/]+)/">', body).group(1)
    return a, b


@pytest.fixture
def twice(example):
    """step-19 submitted a second time (a retry with one candidate fewer): two jobs, one step id."""
    request = example_json("request.json")
    request["candidates"] = [c for c in request["candidates"] if c["item_id"] != "web-context7-overview"]
    return run_job(example["owner"], request, "again")


def test_two_picked_timeline_columns_compare_the_earlier_as_a(owner_client, example):
    ready, hostile = example["ready"], example["hostile"]
    body = owner_client.get("/compare/", {"pick": [str(hostile.id), str(ready.id)]}).content.decode()
    assert _problems(body) == []
    assert _heads(body) == (str(ready.id), str(hostile.id))
    assert "Flipped items" in body


def test_the_run_page_offers_every_step_column_as_a_pick(owner_client, example):
    body = owner_client.get("/runs/run-42/matrix/").content.decode()
    assert '<form id="compare-picker" method="get" action="/compare/"' in body
    picks = re.findall(r'<input type="checkbox" name="pick" value="([^"]+)" form="compare-picker"', body)
    assert sorted(picks) == sorted(str(example[name].id) for name in ("ready", "blocked", "hostile"))


@pytest.mark.parametrize("picks", [[], ["one"], ["a", "b", "c"]])
def test_picking_other_than_two_steps_says_so(owner_client, example, picks):
    values = [str(example["ready"].id), str(example["blocked"].id), str(example["hostile"].id)][:len(picks)]
    response = owner_client.get("/compare/", {"pick": values} if values else {"pick": ""})
    body = response.content.decode()
    assert response.status_code == 200
    assert f"Pick exactly two steps of the timeline to compare (you picked {len(values)})." in _problems(body)
    assert 'id="compare-form"' in body and "Flipped items" not in body


def test_a_by_itself_asks_for_b_on_the_compare_page(owner_client, example):
    response = owner_client.get("/compare/", {"a": str(example["ready"].id)})
    body = response.content.decode()
    assert response.status_code == 200 and 'id="compare-form"' in body
    assert _problems(body) == ["Pick B too: a comparison needs two steps."]
    # A's run is filled in and B's steps are listed to pick from
    assert 'name="run" list="recent-runs" value="run-42"' in body
    assert re.search(r'<select name="b">.*?step-20 · attempt 2 of 2 · [^<]* UTC · ready</option>', body, re.S)


def test_an_unknown_assembly_or_run_is_a_message_on_the_compare_page_not_an_error_page(owner_client, example):
    response = owner_client.get("/compare/", {"a": "00000000-0000-0000-0000-000000000000", "b": str(example["ready"].id)})
    body = response.content.decode()
    assert response.status_code == 404 and 'id="compare-form"' in body and 'class="error-page"' not in body
    assert _problems(body) == ["A: no assembly “00000000-0000-0000-0000-000000000000” in your tenants "
                               "(give its run to pick a step by its id)."]
    response = owner_client.get("/compare/", {"run": "run-nope", "a": "step-19", "b": "step-20"})
    assert response.status_code == 404
    assert "A: no run “run-nope” in your tenants." in _problems(response.content.decode())


def test_steps_are_named_by_run_and_step_id(owner_client, example):
    """The example submits step-20 twice (blocked, then the hostile retry): `step-20#2` is the second."""
    body = owner_client.get("/compare/", {"run": "run-42", "a": "step-19", "b": "step-20#2"}).content.decode()
    assert _problems(body) == []
    assert _heads(body) == (str(example["ready"].id), str(example["hostile"].id))
    body = owner_client.get("/compare/", {"run": "run-42", "a": "step-19", "b": "step-20#1"}).content.decode()
    assert _heads(body) == (str(example["ready"].id), str(example["blocked"].id))


def test_a_run_alone_lists_its_steps_to_pick(owner_client, example):
    body = owner_client.get("/compare/", {"run": "run-42"}).content.decode()
    assert _problems(body) == ["Pick the two steps to compare: A and B."]
    for name in ("a", "b"):
        options = re.search(rf'<select name="{name}">(.*?)</select>', body, re.S).group(1)
        assert len(re.findall(r"<option ", options)) == 3


def test_two_submissions_of_one_step_id_are_told_apart(owner_client, example, twice):
    ready = example["ready"]
    ambiguous = owner_client.get("/compare/", {"run": "run-42", "a": "step-19", "b": "step-20"}).content.decode()
    assert _problems(ambiguous) == ["A: step “step-19” was submitted 2 times: pick one attempt.",
                                    "B: step “step-20” was submitted 2 times: pick one attempt."]
    body = owner_client.get("/compare/", {"run": "run-42", "a": "step-19#1", "b": "step-19#2"}).content.decode()
    assert _problems(body) == [] and _heads(body) == (str(ready.id), str(twice.id))
    assert "step-19 · attempt 1 of 2 · " in body and "step-19 · attempt 2 of 2 · " in body
    assert "web-context7-overview" in body  # only in A
    run_page = owner_client.get("/runs/run-42/matrix/").content.decode()
    heads = re.findall(r'<th class="step-head">.*?</th>', run_page, re.S)
    labels = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", head)).strip() for head in heads]
    assert len(labels) == len(set(labels)) == AssemblyJob.objects.filter(run__run_id="run-42").count()
    assert any("step-19 #1" in label for label in labels) and any("step-19 #2" in label for label in labels)


def test_an_outsider_can_compare_nothing_of_another_tenant(outsider_client, example):
    response = outsider_client.get("/compare/", {"a": str(example["ready"].id), "b": str(example["hostile"].id)})
    body = response.content.decode()
    assert response.status_code == 404 and "Flipped items" not in body and " UTC · " not in body
    assert "run-42" not in body  # neither the run's id nor its steps
    response = outsider_client.get("/compare/", {"run": "run-42", "a": "step-19", "b": "step-20#2"})
    body = response.content.decode()
    assert response.status_code == 404 and "Flipped items" not in body and " UTC · " not in body
    assert _problems(body)[0] == "A: no run “run-42” in your tenants."
