"""Cases written for mutants of manifests/dashboard_selectors.py and policies/selectors.py that
survived `make mutate-sample` (docs/mutation.md, "Over the whole product"): the largest items'
cells, how a content part that is neither text nor a list is shown, the inspector's search over
source_ref, and the message for a policy id found in two of the user's tenants.

Oracles: documents written here by hand, and their expected rows written out cell by cell.
"""

from __future__ import annotations

import pytest

from manifests.dashboard_selectors import (
    ItemFilter,
    _content_segments,
    document_items_filtered,
    largest_items_of_document,
)


def _item(item_id, tokens, **fields):
    return {"item_id": item_id, "kind": "tool_result", "source_type": "tool", "partition": "evidence",
            "tokens": tokens, **fields}


def test_the_largest_items_are_listed_largest_first_with_every_cell():
    sections = {"included": [
        _item("small", 10, source_ref={"repo": "acme/api"}),
        _item("unknown", None, kind="file", source_type="repository", partition="working_set"),
        _item("big", 300, source_ref={"tool_name": "grep"}),
    ]}
    assert largest_items_of_document(sections) == [
        {"item_id": "big", "kind": "tool_result", "source_type": "tool", "partition": "evidence", "tokens": 300,
         "source": "tool grep"},
        {"item_id": "small", "kind": "tool_result", "source_type": "tool", "partition": "evidence", "tokens": 10,
         "source": "repository acme/api"},
        {"item_id": "unknown", "kind": "file", "source_type": "repository", "partition": "working_set",
         "tokens": None, "source": "no repository, URL or tool"},
    ]


def test_an_item_of_unknown_size_comes_after_every_counted_one_even_a_zero():
    sections = {"included": [_item("unknown", None, tokens_estimate=9), _item("zero", 0)]}
    assert [r["item_id"] for r in largest_items_of_document(sections)] == ["zero", "unknown"]


def test_a_content_value_that_is_neither_text_nor_a_list_is_shown_as_json_with_sorted_keys():
    assert _content_segments({"b": 1, "a": 2}) == [{"text": '{"a": 2, "b": 1}', "block": None, "untrusted": False}]


def test_an_empty_text_part_shows_nothing():
    assert _content_segments([{"type": "text", "text": ""}]) == []
    assert _content_segments([{"type": "text"}]) == []


def test_the_inspector_search_finds_an_item_by_its_source_ref():
    sections = {"included": [_item("a", 5, source_ref={"path": "src/needle.py"}), _item("b", 5)]}
    kept = document_items_filtered(sections, ItemFilter(q="needle"))
    assert [row["record"]["item_id"] for row in kept] == ["a"]


@pytest.mark.django_db
def test_a_policy_id_in_two_of_the_users_tenants_asks_for_the_tenant(example_policy_text):
    from django.contrib.auth import get_user_model

    from ctxeng.accounts.models import Tenant
    from ctxeng.accounts.services import tenant_member_add
    from ctxeng.server.errors import BadReference
    from policies.selectors import policy_get
    from policies.services import policy_import

    for slug in ("tenant-a", "tenant-b"):
        tenant_member_add(username="both", tenant_slug=slug, roles=["reviewer"])
        policy_import(tenant=Tenant.objects.get(slug=slug), text=example_policy_text, user=None, publish=False)
    user = get_user_model().objects.get(username="both")
    with pytest.raises(BadReference, match=r"policy source-research: exists in several of your tenants; add \?tenant="):
        policy_get(user, "source-research")
    assert policy_get(user, "source-research", tenant="tenant-b").tenant.slug == "tenant-b"


@pytest.mark.django_db
def test_an_assembly_under_a_policy_with_only_a_draft_is_refused_naming_the_policy(example_policy_text):
    from ctxeng.accounts.models import Tenant
    from ctxeng.server.errors import BadReference
    from policies.selectors import revision_for_assembly
    from policies.services import policy_import

    tenant = Tenant.objects.create(slug="tenant-d", name="tenant-d")
    policy_import(tenant=tenant, text=example_policy_text, user=None, publish=False)
    with pytest.raises(BadReference, match="policy.id: policy 'source-research' has no published revision"):
        revision_for_assembly(tenant=tenant, policy_id="source-research", revision=None)


def test_an_anthropic_content_list_shows_each_part_in_order_a_tool_use_by_its_name_and_id():
    """Mixed content (seed 643005): text, the agent's tool_use (its input as JSON with sorted keys,
    labelled by tool name and id), a tool_result (labelled by the call it answers), a bare value
    and a part of another type, each its own segment in the order given."""
    content = [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls", "a": 1}},
        {"type": "tool_result", "tool_use_id": "toolu_0", "content": "done"},
        "loose",
        {"type": "image", "source": {"x": 1}},
    ]
    plain = {"block": None, "untrusted": False}
    assert _content_segments(content) == [
        {"text": "Let me look.", **plain},
        {"text": '{"a": 1, "command": "ls"}', **plain, "tool": "tool_use bash id=toolu_1"},
        {"text": "done", **plain, "tool": "tool_result for toolu_0"},
        {"text": '"loose"', **plain},
        {"text": '{"source": {"x": 1}, "type": "image"}', **plain},
    ]


# Written for a survivor of seed 349366 (docs/mutation.md).
@pytest.mark.django_db
def test_a_re_injected_item_names_the_artifact_and_revision_it_was_loaded_from(owner_client, example):
    """A candidate submitted as an artifact_ref (no content) is shown with the stored artifact's
    content and the artifact's id and revision as the request named them."""
    import copy

    from manifests.examples import example_json
    from manifests.services import artifact_create

    from .conftest import run_job

    request = example_json("request.json")
    plan = next(c for c in request["candidates"] if c["item_id"] == "plan-42-r5")
    artifact_create(user=example["owner"], tenant=example["tenant"], artifact_id="plan-42", revision=5,
                    kind="research_plan", content=plan["content"], writer="artifact-store/v1", scope=plan["scope"])
    request = copy.deepcopy(request)
    request["step_id"] = "step-21"
    plan = next(c for c in request["candidates"] if c["item_id"] == "plan-42-r5")
    plan["content"] = None
    plan["artifact_ref"] = {"artifact_id": "plan-42", "revision": 5}
    job = run_job(example["owner"], request, "re-injected")
    body = owner_client.get(f"/assemblies/{job.id}/item/", {"item_id": "plan-42-r5"},
                            headers={"HX-Request": "true"}).content.decode()
    assert "(re-injected from artifact plan-42@5)" in body
    assert "Plan v5: cover all five repositories; open items OI-1..OI-3." in body


# Written for a survivor of seed 349366 (docs/mutation.md).
@pytest.mark.django_db
def test_the_matrix_cells_of_a_page_of_steps_are_those_steps_only(example):
    """run_item_cells reads the decisions of the steps asked for (`job_ids`), not the whole run's:
    the matrix of a 1,000-step run reads its 20 shown steps' rows."""
    from manifests.dashboard_selectors import run_item_cells

    from .long_run import long_run

    jobs = long_run([example["ready"], example["blocked"]], steps=3, block=1)
    run = jobs[0].run
    items = ["plan-42-r5", "task-goal"]
    every = run_item_cells(run, items, [job.pk for job in jobs])
    assert {job for _, job in every} == {str(job.id) for job in jobs}
    shown = run_item_cells(run, items, [jobs[1].pk])
    assert set(shown) == {("plan-42-r5", str(jobs[1].id)), ("task-goal", str(jobs[1].id))}
    assert shown == {key: every[key] for key in shown}
    assert run_item_cells(run, items) == every  # without job_ids: every step of the run
