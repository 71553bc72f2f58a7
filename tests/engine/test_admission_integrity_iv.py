"""Admission integrity IV (issue 39): lineage cannot launder, findings of earlier turns keep their
scope, approval is an independent object, blocked reasons are the seed's controlled set.

Every expected decision below is written by hand from the seed's rule, the request and the policy;
none is read back from a manifest the engine produced.
"""

from __future__ import annotations

import copy

from ctxeng.engine.vocabulary import BlockedReason

from .builders import SCOPE, excluded_record, item, policy, request, run, sha, with_budget

PI_REF = {"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "1-20"}


def lineage(*steps: tuple[str, str, str]) -> list[dict]:
    """`(node_id, type, content)` in order, each node the input of the next."""
    nodes, previous = [], None
    for node_id, kind, content in steps:
        nodes.append({"node_id": node_id, "type": kind, "digest": sha(content),
                      "input_node_ids": [previous] if previous else []})
        previous = node_id
    return nodes


# --------------------------------------------------------------------------- 6. blocked reasons


def test_blocked_reasons_are_exactly_the_seeds_controlled_set():
    """Seed §10: `blocked_reason: required_partition_missing | transform_blocked`, nothing else."""
    assert {r.value for r in BlockedReason} == {"required_partition_missing", "transform_blocked"}


def test_a_control_part_too_large_to_fit_blocks_with_required_partition_missing_and_says_why_in_the_detail():
    """A 600-word system text in a control partition of at most 300 tokens (eviction never): the
    control part cannot be placed, which is a required partition missing; the budget is the detail."""
    big = "Follow the house rules. " * 150
    pol = policy()
    pol["budget"]["partitions"]["control"].update(minimum=200, maximum=300)
    req = request()
    req["candidates"][0] = item("system", "system_policy", big)
    r = run(req, pol)
    a = r.manifest.assembly
    assert (a.status, a.blocked_reason) == ("blocked", "required_partition_missing")
    assert "system" in a.missing
    assert any(line.startswith("budget_exhausted: partition 'control'") for line in a.blocked_detail)
    assert a.assembly_input_hash is None and a.serialized_model_input_hash is None


# --------------------------------------------------------------------------- 1. lineage laundering


def test_an_excerpt_whose_lineage_names_a_stale_item_is_not_admitted_on_its_own_source_ref():
    """The raw read is at commit 0ld (stale: the task requires c0ffee). The excerpt claims c0ffee in
    its own source_ref but its lineage says it was cut from the stale read: it inherits stale_revision."""
    raw = item("ev-raw", content="results are keyed by call id, in order", source_ref={**PI_REF, "commit": "0ld"})
    excerpt = item("ev-excerpt", content="keyed by call id", source_ref={**PI_REF, "lines": "2-3"},
                   source_lineage=lineage(("ev-raw", "repository_source", "results are keyed by call id, in order"),
                                          ("ev-excerpt", "excerpt", "keyed by call id")))
    r = run(request(extra=[raw, excerpt], required_revisions={"pi": "c0ffee"}))
    assert excluded_record(r, "ev-raw").reason == "stale_revision"
    ex = excluded_record(r, "ev-excerpt")
    assert (ex.reason, ex.hard_gate) == ("stale_revision", "required_revision")
    assert "'ev-raw'" in ex.detail
    assert r.manifest.assembly.status == "ready"


def test_the_same_excerpt_of_an_admitted_read_is_admitted():
    """Control for the rule above: lineage is followed, not distrusted."""
    raw = item("ev-raw", content="results are keyed by call id, in order", source_ref=PI_REF)
    excerpt = item("ev-excerpt", content="keyed by call id", source_ref={**PI_REF, "lines": "2-3"},
                   source_lineage=lineage(("ev-raw", "repository_source", "results are keyed by call id, in order"),
                                          ("ev-excerpt", "excerpt", "keyed by call id")))
    r = run(request(extra=[raw, excerpt], required_revisions={"pi": "c0ffee"}))
    assert {"ev-raw", "ev-excerpt"} <= set(r.manifest.included_ids())


def test_standing_follows_lineage_and_input_ids_transitively():
    """memory of another tenant (permission_denied) -> a note whose lineage names it -> a summary of
    the note by input_item_ids -> an excerpt of the summary by lineage: all three inherit the denial."""
    foreign = item("mem", "memory_object", "the other tenant's roadmap", scope="tenant-z/project-q/task-9")
    note = item("note", "editable_project_file", "roadmap notes",
                source_lineage=lineage(("mem", "memory_object", "the other tenant's roadmap"), ("note", "note", "roadmap notes")))
    summary = item("sum", "model_summary", "Goal: plan\nOpen Items: OI-1", input_item_ids=["note"],
                   source_refs=[{"path": "notes/note.md", "revision": 1}], preserves={"open_item_ids": ["OI-1"]}, producer="agent/v1")
    cut = item("cut", "editable_project_file", "plan",
               source_lineage=lineage(("sum", "model_summary", "Goal: plan\nOpen Items: OI-1"), ("cut", "excerpt", "plan")))
    r = run(request(extra=[cut, summary, note, foreign]))  # listed before their inputs: order does not matter
    for item_id in ("mem", "note", "sum", "cut"):
        assert excluded_record(r, item_id).reason == "permission_denied", item_id
    assert "'mem'" in excluded_record(r, "note").detail
    assert "'note'" in excluded_record(r, "sum").detail
    assert "'sum'" in excluded_record(r, "cut").detail


def test_a_lineage_node_outside_the_request_changes_nothing():
    """A lineage node that names no candidate is history the engine cannot see: the item is judged on its own."""
    excerpt = item("ev-excerpt", content="keyed by call id", source_ref={**PI_REF, "lines": "2-3"},
                   source_lineage=lineage(("raw-elsewhere", "repository_source", "x"), ("ev-excerpt", "excerpt", "keyed by call id")))
    r = run(request(extra=[excerpt], required_revisions={"pi": "c0ffee"}))
    assert "ev-excerpt" in r.manifest.included_ids()


_ = (copy, SCOPE, with_budget)
