"""Admission integrity IV (issue 39): lineage cannot launder, findings of earlier turns keep their
scope, approval is an independent object, blocked reasons are the seed's controlled set.

Every expected decision below is written by hand from the seed's rule, the request and the policy;
none is read back from a manifest the engine produced.
"""

from __future__ import annotations

import pytest

from ctxeng import starters
from ctxeng.engine import InvalidInput, assemble, parse_policy, parse_request
from ctxeng.engine.vocabulary import BlockedReason

from .builders import CREATED_AT, excluded_record, item, policy, request, run, sha
from .test_starters import candidate, conversation, request_for, research_resident

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



# --------------------------------------------------------------------------- 2. negative findings of earlier turns

TURNS = {"input_item_ids": ["turn-17", "turn-18", "turn-19"], "input_range": {"start_item_id": "turn-17", "end_item_id": "turn-19"}}


def checkpoint_summary(conflicts: str, **fields) -> dict:
    """A summary of earlier turns (not candidates: the seed's checkpoint case), keeping the goal and
    open items, with `conflicts` as its negative-findings section."""
    text = f"Goal: find retry logic\nOpen Items: OI-1\nConflicts and Negative Findings: {conflicts}"
    base = dict(TURNS, source_refs=[{**PI_REF}], preserves={"open_item_ids": ["OI-1"]}, producer="research-agent/v2")
    base.update(fields)
    return item("sum", "model_summary", text, **base)


def findings_policy() -> dict:
    pol = policy()
    pol["transforms"]["preserve"] = ["goal", "open_items", "conflicts_and_negative_findings"]
    return pol


def judged(result) -> list[tuple[str, str, str]]:
    (record,) = [t for t in result.manifest.transforms if t.output_item_id == "sum"]
    return [(j.statement, j.judged_as, j.result) for j in record.negative_findings.statements]


def test_an_unscoped_negative_finding_of_earlier_turns_is_transform_blocked():
    r = run(request(extra=[checkpoint_summary("no retry logic was found in continue")]), findings_policy())
    ex = excluded_record(r, "sum")
    assert ex.reason == "transform_blocked" and ex.failed_assertions == ["conflicts_and_negative_findings"]
    assert judged(r) == [("no retry logic was found in continue", "negative_finding", "failed")]
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.negative_findings.inputs_not_visible == ["turn-17", "turn-18", "turn-19"]


def test_not_found_turned_into_does_not_exist_is_transform_blocked_without_inputs():
    r = run(request(extra=[checkpoint_summary("retry logic does not exist in continue")]), findings_policy())
    assert excluded_record(r, "sum").reason == "transform_blocked"
    assert judged(r) == [("retry logic does not exist in continue", "existence_claim", "failed")]


def test_a_scoped_negative_finding_of_earlier_turns_passes_and_is_recorded_as_judged():
    finding = "no retry logic found in continue (searched: gui/src, core/)"
    r = run(request(extra=[checkpoint_summary(finding)]), findings_policy())
    assert "sum" in r.manifest.included_ids()
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "passed"
    assert record.negative_findings.statements[0].scope == ["core/", "gui/src"]
    assert judged(r) == [(finding, "negative_finding", "passed")]


def test_an_existence_claim_fails_even_when_the_inputs_are_candidates():
    notes = item("notes-1", content="- no retry logic found in continue (searched: gui/src)")
    s = checkpoint_summary("no retry logic found in continue (searched: gui/src); retry logic does not exist in core",
                           input_item_ids=["notes-1"], input_range=None, source_refs=[{**PI_REF, "path": "src/notes-1.ts"}])
    r = run(request(extra=[notes, s]), findings_policy())
    assert excluded_record(r, "sum").reason == "transform_blocked"
    assert judged(r) == [
        ("no retry logic found in continue (searched: gui/src)", "negative_finding", "passed"),
        ("retry logic does not exist in core", "existence_claim", "failed"),
    ]


def test_the_runtimes_checkpoint_with_an_unscoped_finding_is_blocked_like_a_supplied_summary():
    checkpoint = {"goal": "find retry logic", "current_stage": "drafting", "open_item_ids": ["OI-1"],
                  "conflicts_and_negative_findings": ["no retry logic was found in continue"], **TURNS}
    r = run(request(checkpoint=checkpoint), findings_policy())
    ex = excluded_record(r, "checkpoint-summary")
    assert ex.reason == "transform_blocked" and "conflicts_and_negative_findings" in ex.failed_assertions


# --------------------------------------------------------------------------- 3. approval is an independent object

DESTINATION = "blog/context-hygiene"
APPROVED_BY = {"review_decision": {"source_types": ["runtime_state"], "producers": ["review-desk/v1"]}}


def publishing_policy(**stage) -> dict:
    return policy(stages={"publishing": {"require": ["review_decision"], "approved_by": APPROVED_BY, **stage}})


def draft() -> dict:
    return item("draft", "runtime_state", "draft 2", kind="article_draft", revision=2)


def review(source_type: str = "runtime_state", producer: str = "review-desk/v1", **binding) -> dict:
    ref = {"object_id": "review-1", "path": "reviews/r1.md", "draft_revision": 2, "draft_content_hash": sha("draft 2"),
           "destination": DESTINATION, **binding}
    return item("review", source_type, "Approved for publication.", kind="review_decision", producer=producer, source_ref=ref)


def publishing(*extra: dict, destination: str | None = DESTINATION):
    state = {"publish_destination": destination} if destination is not None else None
    return run(request(extra=[draft(), *extra], stage="publishing", runtime_state=state), publishing_policy())


def test_a_review_from_the_named_approver_binding_draft_hash_and_destination_lets_the_step_publish():
    assert publishing(review()).manifest.assembly.status == "ready"


def test_a_project_editable_file_labelled_review_decision_does_not_approve():
    r = publishing(review("editable_project_file", producer="agent/v1"))
    a = r.manifest.assembly
    assert (a.status, a.blocked_reason, a.missing) == ("blocked", "required_partition_missing", ["review_decision"])
    assert "source type 'editable_project_file' is not an approval source" in a.blocked_detail[0]


def test_a_runtime_review_the_agent_produced_does_not_approve():
    pol = policy(stages={"publishing": {"require": ["review_decision"],
                                        "approved_by": {"review_decision": {"source_types": ["runtime_state"], "producers": ["agent/v1", "review-desk/v1"]}}}})
    r = run(request(extra=[draft(), review(producer="agent/v1")], stage="publishing", runtime_state={"publish_destination": DESTINATION}), pol)
    assert r.manifest.assembly.status == "blocked"
    assert "produced by the agent itself" in r.manifest.assembly.blocked_detail[0]


def test_a_review_for_another_destination_or_none_does_not_approve():
    other = publishing(review(destination="newsletter/weekly"))
    assert other.manifest.assembly.status == "blocked"
    assert "'newsletter/weekly'" in other.manifest.assembly.blocked_detail[0]
    unbound = publishing(review(destination=None))
    assert unbound.manifest.assembly.status == "blocked" and "binds no destination" in unbound.manifest.assembly.blocked_detail[0]
    unstated = publishing(review(), destination=None)
    assert unstated.manifest.assembly.status == "blocked" and "publish destination" in unstated.manifest.assembly.blocked_detail[0]


def test_a_review_of_another_draft_content_does_not_approve():
    r = publishing(review(draft_content_hash=sha("draft 2, before the last edit")))
    assert r.manifest.assembly.status == "blocked"


def test_a_policy_requiring_a_review_must_name_an_independent_approver():
    cases = [
        ({"require": ["review_decision"]}, "stages.publishing.require[0]"),
        ({"require": ["review_decision"], "approved_by": {"review_decision": {"source_types": ["editable_project_file"], "producers": ["desk"]}}},
         "stages.publishing.approved_by.review_decision.source_types[0]"),
        ({"require": ["review_decision"], "approved_by": {"review_decision": {"source_types": ["model_summary"], "producers": ["desk"]}}},
         "stages.publishing.approved_by.review_decision.source_types[0]"),
        ({"require": [], "approved_by": APPROVED_BY}, "stages.publishing.approved_by.review_decision"),
    ]
    for stage, path in cases:
        with pytest.raises(InvalidInput) as err:
            parse_policy(policy(stages={"publishing": stage}))
        assert path in str(err.value), (stage, str(err.value))
    agent = policy(scope={"principal_policy": "agent/v1"},
                   stages={"publishing": {"require": ["review_decision"], "approved_by": {"review_decision": {"source_types": ["runtime_state"], "producers": ["agent/v1"]}}}})
    with pytest.raises(InvalidInput) as err:
        parse_policy(agent)
    assert "stages.publishing.approved_by.review_decision.producers[0]" in str(err.value)


# --------------------------------------------------------------------------- 4. starters are the seed's own case


def starter_run(name: str, candidates: list[dict], **fields):
    return assemble(parse_request(request_for(name, 16000, candidates, [], **fields)), starters.load(name), created_at=CREATED_AT)


def research_step(*extra: dict, stage: str, **fields):
    turn = candidate("user-1", "user_message", "user_request", "task_intent", {"object_id": "user-1"}, "Publish the article.", trust="task_authority")
    draft = candidate("draft", "article_draft", "runtime_state", "state", {"object_id": "draft-42"}, "draft 2", trust="trusted_state", revision=2)
    return starter_run("research-agent", [*research_resident(), turn, draft, *extra], stage=stage, **fields)


def desk_review(producer: str = "review-desk", source_type: str = "review_service") -> dict:
    return candidate("review", "review_decision", source_type, "state",
                     {"object_id": "review-42", "draft_revision": 2, "draft_content_hash": sha("draft 2"), "destination": DESTINATION},
                     "Approved.", trust="trusted_state", producer=producer)


def test_the_research_starter_does_not_publish_without_a_review_from_the_review_desk():
    state = {"publish_destination": DESTINATION}
    bare = research_step(stage="publishing", runtime_state=state).manifest.assembly
    assert (bare.status, bare.blocked_reason, bare.missing) == ("blocked", "required_partition_missing", ["review_decision"])
    assert research_step(desk_review(), stage="publishing", runtime_state=state).status == "ready"
    # the agent's own runtime state, labelled review_decision, is no approval
    own = research_step(desk_review(producer="ctxeng.sdk", source_type="runtime_state"), stage="publishing", runtime_state=state)
    assert own.manifest.assembly.status == "blocked"


def test_the_research_starter_does_not_read_the_publish_receipt_while_drafting():
    receipt = candidate("receipt", "publish_receipt", "runtime_state", "state", {"object_id": "receipt-42"},
                        "Published at https://example.org/a", trust="trusted_state")
    r = research_step(receipt, stage="drafting")
    ex = excluded_record(r, "receipt")
    assert ex.reason == "ranking_lost" and "not relevant at stage drafting" in ex.detail


@pytest.mark.parametrize("name", ["chat-agent", "coding-agent"])
def test_chat_and_coding_starters_keep_goal_and_hard_constraints_resident_in_the_protected_zone(name):
    candidates, calls, _ = conversation()
    goal = candidate("goal", "goal", "user_request", "task_intent", {"object_id": "goal"}, "Keep the answers short.", trust="task_authority", relevance=0.0)
    rules = candidate("rules", "hard_constraints", "user_request", "task_intent", {"object_id": "rules"}, "Never quote prices.", trust="task_authority", relevance=0.0)
    r = assemble(parse_request(request_for(name, 16000, [*candidates, goal, rules], calls)), starters.load(name), created_at=CREATED_AT)
    assert r.status == "ready", r.manifest.assembly.blocked_detail
    placed = {i.item_id: (i.load_mode, i.partition) for i in r.manifest.included}
    assert placed["goal"] == ("resident", "control") and placed["rules"] == ("resident", "control")
    # a step without them is not blocked: they are resident when present, not required
    assert assemble(parse_request(request_for(name, 16000, candidates, calls)), starters.load(name), created_at=CREATED_AT).status == "ready"


@pytest.mark.parametrize("name", ["chat-agent", "coding-agent", "research-agent"])
def test_every_starter_preserves_goal_constraints_and_negative_findings_through_a_summary(name):
    preserve = {k.value for k in starters.load(name).transforms.preserve}
    assert {"goal", "constraints", "conflicts_and_negative_findings"} <= preserve
