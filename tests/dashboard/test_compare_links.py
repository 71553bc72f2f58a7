"""/compare/ (issue 41): every changed item opens the inspector of its step (B for a flip and an
item only in B, A for the decision before and an item only in A), with its label beside the id."""

from __future__ import annotations

from manifests.examples import example_json


def test_each_change_opens_its_steps_inspector_on_the_item(owner_client, example):
    a, b = example["ready"], example["blocked"]
    body = owner_client.get("/compare/", {"a": str(a.id), "b": str(b.id)}).content.decode()
    ids = {name: {c["item_id"] for c in example_json(name)["candidates"]} for name in ("request.json", "request-blocked.json")}
    only_a = ids["request.json"] - ids["request-blocked.json"]
    only_b = ids["request-blocked.json"] - ids["request.json"]
    assert only_a
    for item_id in only_a:
        assert f'href="/assemblies/{a.id}/?item={item_id}"' in body, item_id
    for item_id in only_b:
        assert f'href="/assemblies/{b.id}/?item={item_id}"' in body, item_id


def test_items_are_labelled_by_their_file_url_or_artifact(owner_client, example):
    # written by hand from the example request's source refs
    expected = {"evidence-pi-transform-context": "packages/agent/src/types.ts:149-200 @ pi",
                "web-context7-overview": "https://context7.com/docs/agentic-tools/overview",
                "plan-42-r4": "research_plan plan-42 r4", "trace-old-1": "trace trace-1"}
    for item_id, label in expected.items():
        body = owner_client.get(f"/assemblies/{example['ready'].id}/", {"q": item_id}).content.decode()
        assert f'<div class="item-label">{label}</div>' in body, item_id
        selected = owner_client.get(f"/assemblies/{example['ready'].id}/", {"item": item_id}).content.decode()
        assert f'<span class="item-label big-label">{label}</span>' in selected, item_id
