"""Over random requests and policies: no recorded check is `passed` while its fact is false.

Each fact is recomputed here from the request (what the candidates were, which generated log lines
are failures) and from the payload the model receives, never from the engine's own records.
"""

from __future__ import annotations

import copy
import hashlib

from hypothesis import example, given
from hypothesis import strategies as st

from ctxeng.engine import transforms
from tests.golden import delivered_blocks

from .builders import item, policy, reasons, request, run
from .test_properties import PROPERTY_SETTINGS, _assemble, cases


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def generated_failures(content: str) -> list[str]:
    # The generator in test_properties writes "PASSED t", "FAILED t - boom", "ERROR x", "ok".
    return [ln for ln in content.splitlines() if ln.split(" ", 1)[0] in ("FAILED", "ERROR")]


@PROPERTY_SETTINGS
@given(cases())
def test_no_assertion_is_passed_when_its_fact_is_false(case):
    req, pol = case
    r = _assemble(req, pol)
    m = r.manifest
    received = {c["item_id"]: c for c in req["candidates"]}
    blocks = delivered_blocks(r.serialized_input, r.manifest_dict()) if r.serialized_input is not None else {}
    included = {i.item_id: i for i in m.included}
    for t in m.transforms:
        if t.status == "blocked":
            assert t.output_item_id not in included and "failed" in t.preservation_assertions.values()
            continue
        out = included.get(t.output_item_id)
        if out is None:
            continue
        if t.output_item_id in blocks:
            assert sha(blocks[t.output_item_id]) == t.output_digest == out.content_hash
        a = t.preservation_assertions
        if t.type == "excerpt" and t.output_item_id in received:
            original = received[t.output_item_id]
            node = out.source_lineage[-1]
            assert node.type == "excerpt" and node.input_digest == original["content_hash"] == t.input_digest
            if a.get("failure_lines_kept") == "passed" and t.output_item_id in blocks:
                body, pos = blocks[t.output_item_id], 0
                for line in generated_failures(original["content"]):
                    pos = body.index(line, pos) + len(line)
            if a.get("artifact_ref_present") == "passed":
                assert str(original["source_ref"]["artifact_id"]) in (blocks.get(t.output_item_id) or t.after_excerpt)
        if t.type == "summarize" and t.transformer_version == "ctxeng-structured/1":
            inputs = [received[i] for i in t.input_item_ids]
            text = blocks.get(t.output_item_id, t.after_excerpt)
            if a.get("open_items") == "passed":
                assert all(oi in text for c in inputs for oi in c.get("open_item_ids") or [])
            if a.get("input_digests_present") == "passed":
                assert all(c["content_hash"] in text for c in inputs)
    for e in m.excluded:
        if e.replaced_by is not None:
            assert e.reason == "budget_evicted" and e.replaced_by in included
            summary = next(t for t in m.transforms if t.output_item_id == e.replaced_by)
            assert e.item_id in summary.input_item_ids


@st.composite
def over_budget_state(draw):
    plans = []
    for k in range(draw(st.integers(1, 5))):
        open_ids = draw(st.lists(st.sampled_from([f"OI-{n}" for n in range(1, 9)]), unique=True, max_size=3))
        words = " ".join(f"p{k}w{i}" for i in range(draw(st.integers(5, 300))))
        fields = {"kind": draw(st.sampled_from(["research_plan", "article_draft"])), "open_item_ids": open_ids, "relevance": 0.3}
        if fields["kind"] == "article_draft":
            fields["revision"] = draw(st.integers(1, 9))
        plans.append(item(f"plan-{k}", "runtime_state", words, **fields))
    return plans, draw(st.integers(500, 1500))


def forgetful(build, what: str):
    """A faulty summary builder: forgets the last open item, or the draft revision, it was given."""

    def facts(asm, evicted):
        out = build(asm, evicted)
        if what == "open":
            return {**out, "open_items": out["open_items"][:-1]}
        return {**out, "draft": None}

    return facts


_DRAFT = item("plan-0", "runtime_state", " ".join(f"w{i}" for i in range(300)), kind="article_draft", revision=3, open_item_ids=["OI-2"], relevance=0.3)


@PROPERTY_SETTINGS
@given(over_budget_state(), st.sampled_from([None, "open", "draft"]))
@example(([_DRAFT], 500), "draft")
@example(([_DRAFT], 500), "open")
def test_the_structured_summary_never_passes_an_open_item_or_draft_it_dropped(state, faulty):
    plans, maximum = state
    pol = copy.deepcopy(policy())
    pol["budget"]["partitions"]["state"]["maximum"] = maximum
    pol["budget"]["partitions"]["state"]["kinds"].append("article_draft")
    original = transforms._evicted_facts
    if faulty:
        transforms._evicted_facts = forgetful(original, faulty)
    try:
        r = run(request(extra=plans), pol)
    finally:
        transforms._evicted_facts = original
    m = r.manifest
    for t in m.transforms:
        if t.transformer_version != "ctxeng-structured/1":
            continue
        inputs = [p for p in plans if p["item_id"] in t.input_item_ids]
        assert inputs and all(reasons(r)[p["item_id"]] == "budget_evicted" for p in inputs)
        if t.status == "blocked":
            assert t.output_item_id not in m.included_ids()
            continue
        if r.serialized_input is None:
            continue  # blocked for another reason: nothing reached the model
        text = delivered_blocks(r.serialized_input, r.manifest_dict())[t.output_item_id]  # what the model reads
        open_line = next(ln for ln in text.splitlines() if ln.startswith("Open Items:"))
        assert all(oi in open_line.replace(",", " ").split() for p in inputs for oi in p["open_item_ids"])
        drafts = [p["revision"] for p in inputs if p["kind"] == "article_draft"]
        if drafts:
            assert f"Draft Revision: {max(drafts)}" in text.splitlines()  # the newest draft
