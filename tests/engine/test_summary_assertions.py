"""A supplied summary's preservation assertions, one documented rule at a time (transforms.py).

Each case is a small request in which the right verdict for one assertion can be read off by hand:
the runtime's draft revision against the one the summary preserves, a call still waiting for a
result named in `preserves` or in the text, a source ref pinned by `revision` rather than
`commit`, open items the admitted state (not the runtime) knows. The oracle is the rule as the
module docstring states it, never the manifest's own labels.
"""

from __future__ import annotations

import pytest

from .builders import excluded_record, item, policy, request, run, tool_call

GOOD = "Goal: find pairing rules\nConstraints: fixed revisions\nOpen Items: OI-1\nConflicts: none"


def summary(content: str = GOOD, **fields) -> dict:
    base = dict(
        input_item_ids=["turn-1", "turn-2"],
        input_range={"start_item_id": "turn-1", "end_item_id": "turn-2"},
        source_refs=[{"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": "1-9"}],
        preserves={"open_item_ids": ["OI-1"]},
        producer="research-agent/v2",
    )
    base.update(fields)
    return item("sum", "model_summary", content, **base)


def preserving(*keys: str) -> dict:
    pol = policy()
    pol["transforms"]["preserve"] = list(keys)
    return pol


def verdict(req: dict, pol: dict) -> str:
    """`included`, or the failed assertions of the excluded summary, comma-joined."""
    r = run(req, pol)
    if "sum" in r.manifest.included_ids():
        return "included"
    rec = excluded_record(r, "sum")
    assert rec.reason == "transform_blocked"
    return ",".join(rec.failed_assertions)


@pytest.mark.parametrize(
    "preserved, runtime, drafts, expected",
    [
        (2, 2, [], "included"),
        ("2", 2, [], "included"),  # revisions compare as text
        (1, 2, [], "article_draft_revision"),  # the runtime's draft is newer
        (None, 2, [], "article_draft_revision"),  # nothing preserved
        (None, None, [], "article_draft_revision"),  # the key is required even when nobody states one
        (5, None, [], "included"),  # nothing to compare with: present is enough
        (3, None, [3], "included"),  # the draft among the candidates decides when the runtime is silent
        (2, None, [3], "article_draft_revision"),
        (3, 3, [4], "included"),  # the runtime's word comes first
    ],
)
def test_a_summary_must_preserve_the_current_draft_revision(preserved, runtime, drafts, expected):
    preserves = {"open_item_ids": ["OI-1"]}
    if preserved is not None:
        preserves["article_draft_revision"] = preserved
    extra = [item(f"draft-{n}", "runtime_state", f"draft text {n}", kind="article_draft", revision=n) for n in drafts]
    state = {"article_draft_revision": runtime} if runtime is not None else None
    req = request(extra=[*extra, summary(preserves=preserves)], runtime_state=state)
    assert verdict(req, preserving("article_draft_revision")) == expected


@pytest.mark.parametrize(
    "preserves, text, expected",
    [
        ({"unresolved_tool_calls": ["pending-7"]}, GOOD, "included"),  # named in preserves only
        ({}, GOOD + "\nWaiting on pending-7", "included"),  # named in the text only
        ({"unresolved_tool_calls": ["other"]}, GOOD, "unresolved_tool_calls"),
    ],
)
def test_a_call_still_waiting_is_carried_in_preserves_or_in_the_text(preserves, text, expected):
    s = summary(content=text, preserves={"open_item_ids": ["OI-1"], **preserves})
    req = request(extra=[s], tool_calls=[tool_call("pending-7", None)])
    assert verdict(req, preserving("unresolved_tool_calls")) == expected


def test_a_call_that_has_its_result_need_not_be_named():
    req = request(extra=[item("r1", "tool_result", "ok", call_id="c1"), summary()], tool_calls=[tool_call("c1", "r1")])
    assert verdict(req, preserving("unresolved_tool_calls")) == "included"


@pytest.mark.parametrize(
    "refs, expected",
    [
        ([{"object_id": "turn-1", "revision": 3}], "included"),
        ([{"repo": "pi", "commit": "c0ffee"}, {"object_id": "turn-2", "revision": 1}], "included"),
        ([{"repo": "pi", "commit": "c0ffee"}, {"path": "a.ts"}], "source_refs_and_revisions"),  # one unpinned ref fails them all
        ([], "source_refs_and_revisions"),
    ],
)
def test_every_source_ref_of_a_summary_is_pinned_by_a_commit_or_a_revision(refs, expected):
    assert verdict(request(extra=[summary(source_refs=refs)]), preserving("source_refs_and_revisions")) == expected


def test_open_items_come_from_the_admitted_state_when_the_runtime_states_none():
    # base_items() carries `open` with OI-1; a second state item adds OI-2.
    more = item("open-2", "runtime_state", "OI-2 verify ranking", kind="open_items_summary", open_item_ids=["OI-2", "OI-1"])
    both = summary(content=GOOD + " OI-2", preserves={"open_item_ids": ["OI-1", "OI-2"]})
    assert verdict(request(extra=[more, both]), preserving("open_items")) == "included"
    one = summary(preserves={"open_item_ids": ["OI-1", "OI-2"]})  # OI-2 not in the text
    assert verdict(request(extra=[more, one]), preserving("open_items")) == "open_items"
    # A summary's own open items are not state the runtime knows.
    other = item("sum-0", "model_summary", "Goal: old\nOpen Items: OI-9", input_item_ids=["turn-0"],
                 input_range={"start_item_id": "turn-0", "end_item_id": "turn-0"}, open_item_ids=["OI-9"],
                 source_refs=[{"repo": "pi", "commit": "c0ffee"}], preserves={"open_item_ids": ["OI-1"]}, producer="a/1")
    assert verdict(request(extra=[other, summary()]), preserving("open_items")) == "included"


def test_the_runtimes_open_items_replace_what_the_state_items_say():
    req = request(extra=[summary()], runtime_state={"open_item_ids": ["OI-3"]})
    assert verdict(req, preserving("open_items")) == "open_items"
    req = request(extra=[summary(content=GOOD + " OI-3", preserves={"open_item_ids": ["OI-3"]})], runtime_state={"open_item_ids": ["OI-3"]})
    assert verdict(req, preserving("open_items")) == "included"


@pytest.mark.parametrize(
    "key, text, expected",
    [
        ("current_stage", GOOD + "\nCurrent Stage: drafting", "included"),
        ("current_stage", GOOD, "current_stage"),
        ("done_in_progress_blocked", GOOD + "\nDone / In Progress / Blocked: done: a", "included"),
        ("conflicts_and_negative_findings", "Goal: g\nOpen Items: OI-1\nConflicts and negative findings: none found", "included"),
        ("conflicts_and_negative_findings", "Goal: g\nOpen Items: OI-1", "conflicts_and_negative_findings"),
        ("artifact_refs", GOOD + "\nArtifact / Checkpoint Refs: plan-42@5", "included"),
        ("artifact_refs", GOOD + "\nArtifact Refs: plan-42@5", "included"),
        ("artifact_refs", GOOD + "\nArtifacts: plan-42@5", "artifact_refs"),
        ("hard_constraints", GOOD + "\nHard Constraints: cite fixed revisions", "included"),
    ],
)
def test_a_required_section_must_be_present_with_a_body(key, text, expected):
    assert verdict(request(extra=[summary(content=text)]), preserving(key)) == expected


def test_a_range_whose_ends_are_not_among_the_input_ids_fails_input_items():
    s = summary(input_range={"start_item_id": "turn-1", "end_item_id": "turn-3"})
    assert "input_items" in verdict(request(extra=[s]), preserving()).split(",")
    s = summary(input_range={"start_item_id": "turn-0", "end_item_id": "turn-2"})
    assert "input_items" in verdict(request(extra=[s]), preserving()).split(",")


def test_a_summary_with_a_blank_producer_fails_producer_present():
    assert verdict(request(extra=[summary(producer="   ")]), preserving()) == "producer_present"


# --------------------------------------------------------------------------- negative findings keep their scope

FINDING = "no vector retrieval found in planning-with-files (searched: README.md, docs/, skills/)"


def summary_of_notes(conflicts: str) -> dict:
    """A summary whose one input, `notes-1`, is a candidate holding FINDING: its text is readable."""
    return summary(
        content=f"Goal: g\nOpen Items: OI-1\nConflicts and Negative Findings: {conflicts}",
        input_item_ids=["notes-1"],
        input_range=None,
        source_refs=[{"repo": "pi", "commit": "c0ffee", "path": "src/notes-1.ts", "lines": "1-9"}],
    )


def notes() -> dict:
    return item("notes-1", "repository_source", f"Checked the planner.\n- {FINDING}\nNext: compare with pi.")


def negative_verdict(conflicts: str) -> tuple[str, str]:
    """(verdict, the recorded conflicts_and_negative_findings assertion) for a summary of notes()."""
    r = run(request(extra=[notes(), summary_of_notes(conflicts)]), preserving("conflicts_and_negative_findings"))
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    return ("included" if "sum" in r.manifest.included_ids() else excluded_record(r, "sum").reason), record.preservation_assertions[
        "conflicts_and_negative_findings"
    ]


@pytest.mark.parametrize(
    "conflicts, expected",
    [
        (FINDING, ("included", "passed")),
        # the same scope in another order and wording of the list is the same scope
        ("vector retrieval not found in planning-with-files (searched in skills/, docs/ and README.md)", ("included", "passed")),
        # the scope dropped
        ("no vector retrieval found in planning-with-files", ("transform_blocked", "failed")),
        # the scope narrowed (skills/ was searched too) or widened (src/ was not)
        ("no vector retrieval found in planning-with-files (searched: README.md, docs/)", ("transform_blocked", "failed")),
        ("no vector retrieval found (searched: README.md, docs/, skills/, src/)", ("transform_blocked", "failed")),
        # "not found" rewritten as an existence claim, scope kept or not
        ("vector retrieval does not exist in planning-with-files (searched: README.md, docs/, skills/)", ("transform_blocked", "failed")),
        ("no such retrieval in planning-with-files (searched: README.md, docs/, skills/)", ("transform_blocked", "failed")),
        ("planning-with-files has no vector retrieval", ("transform_blocked", "failed")),
    ],
)
def test_a_negative_finding_of_an_input_reappears_with_the_same_search_scope(conflicts, expected):
    assert negative_verdict(conflicts) == expected


def test_a_summary_of_inputs_the_engine_cannot_read_is_judged_on_its_own_statements():
    # turn-1/turn-2 are earlier history: no input finding can be compared, but the summary's own
    # negative finding is judged (it names its scope), and the record says what was and was not read ...
    kept = summary(content=f"Goal: g\nOpen Items: OI-1\nConflicts: {FINDING}")
    r = run(request(extra=[kept]), preserving("conflicts_and_negative_findings"))
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert "sum" in r.manifest.included_ids()
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "passed"
    nf = record.negative_findings
    assert (nf.inputs_compared, nf.inputs_not_visible) == ([], ["turn-1", "turn-2"])
    assert [(j.statement, j.judged_as, j.result) for j in nf.statements] == [(FINDING, "negative_finding", "passed")]
    # ... a summary asserting no absence, of inputs it cannot read, has nothing judged: not_applicable.
    r = run(request(extra=[summary()]), preserving("conflicts_and_negative_findings"))
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "not_applicable"
    assert record.negative_findings.statements == []
    # ... but an existence claim over a search scope fails on the summary's own text.
    rewritten = summary(content="Goal: g\nOpen Items: OI-1\nConflicts: vector retrieval does not exist (searched: README.md, docs/)")
    assert verdict(request(extra=[rewritten]), preserving("conflicts_and_negative_findings")) == "conflicts_and_negative_findings"
