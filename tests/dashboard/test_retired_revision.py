"""An assembly that ran under a policy revision that is no longer current is marked: a "retired
revision" badge on the run page, the inspector, the window tab and compare, and
`policy.status` / `policy.current` on the API's assembly resource.

The worked example pins revision 3. After revision 4 is published, revision 3 is retired: the old
assemblies and a new submission still pinned to 3 show the badge; one under revision 4 does not.
"""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from manifests.examples import example_json
from policies.services import policy_revision_publish

from .conftest import run_job

BADGE = '<span class="badge warn retired-revision"'


@pytest.fixture
def published_4(example):
    return policy_revision_publish(revision=example["draft"], user=example["owner"], note="floor 0.9")


def _attempt(body: str, job) -> str:
    """The run page's attempt row of one job."""
    return re.search(rf'<tr class="step-row [a-z]+" id="step-\d+">(?:(?!</tr>).)*?/assemblies/{job.id}/.*?</tr>',
                     body, re.S).group(0)


def _api(user, job) -> dict:
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/assemblies/{job.id}/").json()["policy"]


def test_nothing_is_marked_while_the_revision_is_current(owner_client, example):
    assert BADGE not in owner_client.get("/runs/run-42/").content.decode()
    assert BADGE not in owner_client.get(f"/assemblies/{example['ready'].id}/").content.decode()
    assert _api(example["owner"], example["ready"]) == {
        "id": "source-research", "revision": 3, "digest": example["published"].digest, "status": "published", "current": True}


def test_after_a_new_revision_is_published_the_old_assemblies_are_marked(owner_client, example, published_4):
    ready = example["ready"]
    run_page = owner_client.get("/runs/run-42/").content.decode()
    for name in ("ready", "blocked", "hostile"):
        assert BADGE in _attempt(run_page, example[name]), name
    overview = owner_client.get(f"/assemblies/{ready.id}/").content.decode().split('id="overview"', 1)[1].split("</section>", 1)[0]
    assert BADGE in overview
    assert BADGE in owner_client.get(f"/assemblies/{ready.id}/window/").content.decode()
    policy = _api(example["owner"], ready)
    assert (policy["revision"], policy["status"], policy["current"]) == (3, "retired", False)


def test_a_new_assembly_pinned_to_the_retired_revision_is_marked_and_one_under_the_new_is_not(owner_client, example, published_4):
    pinned = run_job(example["owner"], dict(example_json("request.json"), step_id="step-pinned"), "pinned")
    current_request = dict(example_json("request.json"), step_id="step-current", policy={"id": "source-research"})
    current = run_job(example["owner"], current_request, "current")
    assert pinned.policy_revision.revision == 3 and current.policy_revision.revision == 4
    run_page = owner_client.get("/runs/run-42/").content.decode()
    assert BADGE in _attempt(run_page, pinned) and BADGE not in _attempt(run_page, current)
    assert BADGE in owner_client.get(f"/assemblies/{pinned.id}/").content.decode()
    assert BADGE not in owner_client.get(f"/assemblies/{current.id}/").content.decode()
    assert _api(example["owner"], current)["current"] is True and _api(example["owner"], pinned)["current"] is False
    compared = owner_client.get("/compare/", {"a": str(pinned.id), "b": str(current.id)}).content.decode()
    assert BADGE in compared.split('class="compare-a"', 1)[1].split("</p>", 1)[0]
    assert BADGE not in compared.split('class="compare-b"', 1)[1].split("</p>", 1)[0]


def test_the_matrix_marks_a_retired_revision_once_where_its_columns_start(owner_client, example, published_4):
    from .long_run import long_run

    long_run([example["ready"]], steps=6, run_id="run-retired")  # six columns, all under retired revision 3
    matrix = owner_client.get("/runs/run-retired/matrix/").content.decode()
    heads = re.findall(r'<th class="step-head">.*?</th>', matrix, re.S)
    assert len(heads) == 6
    assert [BADGE in head for head in heads] == [True, False, False, False, False, False]
