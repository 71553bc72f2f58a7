"""The pure pieces of stage 7, each against its documented contract, with hand-written oracles.

`section_body`, `mentions_id`, `ref_within`, the turn splitter, the truncation and decision
compression reducers and the checks written apart from them decide whether a summary or a
shortened item is admitted. These tests call them directly on small inputs whose right answer can
be read off by hand, so a wrong comparison, an off-by-one in the room a truncation gets, or a check
that always passes shows here (docs/mutation.md lists the survivors they were written for).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ctxeng.engine.models import ContextItem
from ctxeng.engine.transforms import (
    _SECTIONS,
    _first_line,
    _ref_label,
    check_decision_compression,
    check_truncation,
    decision_compress,
    latest_draft,
    mentions_id,
    ref_within,
    section_body,
    split_turns,
    truncate_turns,
)
from ctxeng.engine.vocabulary import PreserveKey
from ctxeng.engine.working import Candidate

from .builders import item, sha

GOAL = _SECTIONS[PreserveKey.GOAL]


def cand(content: str, *, kind: str = "background", header_tokens: int = 0, revision=None) -> Candidate:
    fields = {"kind": kind} if revision is None else {"kind": kind, "revision": revision}
    it = ContextItem.model_validate(item("x", "editable_project_file", content, **fields))
    return Candidate(item=it, order=0, content=content, trust=it.trust, header_tokens=header_tokens)


class WordCounter:
    """A stand-in tokenizer: one token per whitespace-separated word, so sizes are countable by eye."""

    def count(self, text: str) -> int:
        return len(text.split())


def asm_with_words() -> SimpleNamespace:
    return SimpleNamespace(tokenizer=WordCounter())


# --------------------------------------------------------------------------- sections and ids


@pytest.mark.parametrize(
    "text, body",
    [
        ("Goal: find x\nConstraints: y", "find x"),
        ("GOAL:   find x  ", "find x"),
        ("Goal:x", "x"),
        ("intro line\n  goal: find x\nOpen Items: OI-1", "find x"),
        ("Goal:\n  first part\n  second part\nConstraints: y", "first part\n  second part"),
        ("Goal: a\nb", "a\nb"),
        ("Goal:\nConstraints: y", ""),
        ("Constraints: y", None),
        ("Our goal: x", None),
    ],
)
def test_a_section_body_runs_from_its_heading_to_the_next_heading(text, body):
    assert section_body(GOAL, text) == body


@pytest.mark.parametrize(
    "text, carried",
    [
        ("Open Items: OI-1, OI-2", True),
        ("(OI-1)", True),
        ("OI-1.", True),
        ("OI-1", True),
        ("Open Items: OI-10", False),
        ("XOI-1", False),
        ("OI-1-b", False),
        ("oi-1", False),
    ],
)
def test_an_open_item_id_is_carried_only_as_a_whole_id(text, carried):
    assert mentions_id("OI-1", text) is carried


# --------------------------------------------------------------------------- refs within inputs

PARENT = {"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "1-20"}


@pytest.mark.parametrize(
    "ref, inside",
    [
        ({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "3-9"}, True),
        ({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "1-20"}, True),
        ({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "15-21"}, False),
        ({"repo": "pi", "commit": "beef", "path": "src/a.ts", "lines": "3-9"}, False),
        ({"repo": "pi", "commit": "c0ffee", "path": "src/b.ts", "lines": "3-9"}, False),
        ({"repo": "other", "commit": "c0ffee", "path": "src/a.ts", "lines": "3-9"}, False),
        ({"lines": "3-9"}, False),  # no identity at all: it points nowhere in particular
        ({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "nonsense"}, False),
        ({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts"}, True),
    ],
)
def test_a_source_ref_lies_within_a_parent_with_the_same_identity_and_inside_its_lines(ref, inside):
    assert ref_within(ref, PARENT) is inside


def test_an_artifact_ref_lies_within_the_same_artifact_revision_compared_as_text():
    parent = {"artifact_id": "plan-42", "revision": 5}
    assert ref_within({"artifact_id": "plan-42", "revision": "5"}, parent)
    assert not ref_within({"artifact_id": "plan-42", "revision": 6}, parent)
    assert not ref_within({"artifact_id": "plan-43"}, parent)
    # A field the parent does not have cannot place the ref inside it.
    assert not ref_within({"path": "src/a.ts"}, parent)
    assert ref_within({"repo": "pi", "path": "src/a.ts", "lines": "2"}, {"repo": "pi", "path": "src/a.ts"})


# --------------------------------------------------------------------------- turns and truncation


def test_turns_start_at_speaker_and_step_markers_and_lines_before_the_first_are_one_turn():
    text = "preamble\nmore preamble\nuser: hi\nassistant: hello\ncontinued\nTurn 4 done\nstep 5\ntrace step 6 x\nSYSTEM : z"
    assert split_turns(text) == [
        "preamble\nmore preamble",
        "user: hi",
        "assistant: hello\ncontinued",
        "Turn 4 done",
        "step 5",
        "trace step 6 x",
        "SYSTEM : z",
    ]


def test_text_without_markers_is_one_turn_per_line():
    assert split_turns("a\nb\n\nc") == ["a", "b", "", "c"]
    assert split_turns("user said: no marker here") == ["user said: no marker here"]


# Three turns of 3, 4 and 2 words; the truncation head line is 12 words and a block costs 8 more:
# the newest turns fit when header + 12 + 8 + sum(words + 1 per turn) <= room.
THREE_TURNS = "user: a b\nassistant: c d e\nuser: f"


@pytest.mark.parametrize(
    "room, kept, turns",
    [
        (10 + 12 + 8 + 3 + 5 + 4, "user: a b\nassistant: c d e\nuser: f", "1-3"),
        (10 + 12 + 8 + 3 + 5 + 4 - 1, "assistant: c d e\nuser: f", "2-3"),
        (10 + 12 + 8 + 3 + 5, "assistant: c d e\nuser: f", "2-3"),
        (10 + 12 + 8 + 3 + 5 - 1, "user: f", "3-3"),
        (10 + 12 + 8 + 3, "user: f", "3-3"),
    ],
)
def test_a_truncation_keeps_the_newest_whole_turns_that_fit_the_room(room, kept, turns):
    c = cand(THREE_TURNS, header_tokens=10)
    out, ref = truncate_turns(asm_with_words(), c, room)
    head, body = out.split("\n", 1)
    assert len(head.split()) == 12 and sha(THREE_TURNS) in head
    assert body == kept
    assert ref == {"path": "notes/x.md", "turns": turns}
    assert check_truncation(c, out, ref) == {
        "non_empty": "passed",
        "whole_turns_only": "passed",
        "newest_turn_kept": "passed",
        "hash_present": "passed",
    }


@pytest.mark.parametrize("room", [10 + 8, 10 + 8 + 1, 10 + 12 + 8 + 3 - 1])
def test_a_truncation_returns_nothing_when_not_even_the_newest_turn_fits(room):
    assert truncate_turns(asm_with_words(), cand(THREE_TURNS, header_tokens=10), room) is None


def check(text: str, body: str | None, turns: str, *, hash_ok: bool = True) -> dict:
    c = cand(text)
    head = f"[truncated {sha(text) if hash_ok else 'no hash'}]"
    return check_truncation(c, head if body is None else f"{head}\n{body}", {"turns": turns})


def test_the_truncation_check_passes_a_suffix_of_whole_turns_with_the_right_turn_numbers():
    assert set(check(THREE_TURNS, "assistant: c d e\nuser: f", "2-3").values()) == {"passed"}
    assert set(check(THREE_TURNS, THREE_TURNS, "1-3").values()) == {"passed"}
    assert set(check("a\nb\nc", "b\nc", "2-3").values()) == {"passed"}  # no markers: a line is a turn


@pytest.mark.parametrize(
    "text, body, turns, failed",
    [
        (THREE_TURNS, "c d e\nuser: f", "2-3", {"whole_turns_only"}),  # cut inside a line
        ("user: a\nmore\nassistant: b", "more\nassistant: b", "2-2", {"whole_turns_only"}),  # inside a turn
        (THREE_TURNS, "assistant: c d e\nuser: f", "1-3", {"whole_turns_only"}),  # claims a turn it lacks
        ("a\nb\nc", "b\nc", "1-3", {"whole_turns_only"}),
        (THREE_TURNS, "user: a b\nassistant: c d e", "1-2", {"whole_turns_only", "newest_turn_kept"}),
        (THREE_TURNS, "assistant: z\nuser: f", "2-3", {"whole_turns_only"}),  # not the input's text
        (THREE_TURNS, None, "", {"non_empty", "whole_turns_only", "newest_turn_kept"}),
    ],
)
def test_the_truncation_check_fails_what_is_not_the_newest_whole_turns(text, body, turns, failed):
    results = check(text, body, turns)
    assert {k for k, v in results.items() if v == "failed"} == failed


def test_the_truncation_check_fails_an_output_that_does_not_name_the_full_contents_hash():
    assert check(THREE_TURNS, "user: f", "3-3", hash_ok=False)["hash_present"] == "failed"


# --------------------------------------------------------------------------- decision compression

LOG = "\n".join(
    [
        "Context: we compared three stores",
        "Decision: use store B",
        "some discussion that is not kept",
        "- Reason: B pairs calls by id",
        "* Source: https://docs.example.org/b pi@c0ffee1:src/b.ts",
        "We decided: keep the cache",
        "Because: it is cheap",
        "Notes: ask again next week",
        "Evidence: sha256:" + "a" * 64,
    ]
)


def test_decision_compression_keeps_decision_reason_and_source_lines_with_their_numbers():
    c = cand(LOG, kind="research_plan")
    out, ref = decision_compress(c)
    head, body = out.split("\n", 1)
    assert body.split("\n") == [
        "Decision: use store B",
        "- Reason: B pairs calls by id",
        "* Source: https://docs.example.org/b pi@c0ffee1:src/b.ts",
        "We decided: keep the cache",
        "Because: it is cheap",
        "Evidence: sha256:" + "a" * 64,
    ]
    assert ref["lines"] == "2,4-7,9"
    assert "6 of 9 lines" in head and sha(LOG) in head
    assert set(check_decision_compression(c, out).values()) == {"passed"}


def test_an_item_that_records_no_decision_is_not_decision_compressed():
    assert decision_compress(cand("Reason: none given\nSource: https://x.example/a")) is None
    assert decision_compress(cand("Decisions were hard\nplain text")) is None


def test_the_decision_compression_check_fails_a_dropped_reason_or_source_ref():
    c = cand(LOG, kind="research_plan")
    out, _ = decision_compress(c)
    no_reason = out.replace("\nBecause: it is cheap", "")
    assert check_decision_compression(c, no_reason)["decisions_and_reasons_kept"] == "failed"
    no_url = out.replace("https://docs.example.org/b ", "")
    assert check_decision_compression(c, no_url)["source_refs_kept"] == "failed"
    no_commit = out.replace(" pi@c0ffee1:src/b.ts", "")
    assert check_decision_compression(c, no_commit)["source_refs_kept"] == "failed"
    no_digest = out.replace("Evidence: sha256:" + "a" * 64, "Evidence: gone")
    assert check_decision_compression(c, no_digest)["source_refs_kept"] == "failed"
    no_hash = out.replace(sha(LOG), "sha256:unknown")
    assert check_decision_compression(c, no_hash)["hash_present"] == "failed"
    # The reason's words alone, in the head line only, do not count: the body must carry it.
    moved = out.split("\n", 1)[0] + " Because: it is cheap\n" + no_reason.split("\n", 1)[1]
    assert check_decision_compression(c, moved)["decisions_and_reasons_kept"] == "failed"


def test_the_decision_compression_check_fails_an_item_with_no_decision_or_reason_at_all():
    c = cand("Notes: a\nSource: https://x.example/a")
    assert check_decision_compression(c, f"[{sha(c.content)}]\nSource: https://x.example/a")["decisions_and_reasons_kept"] == "failed"


# --------------------------------------------------------------------------- structured summary helpers


def test_the_newest_draft_revision_compares_numbers_as_numbers_and_ignores_other_kinds():
    drafts = [cand("d", kind="article_draft", revision=9), cand("d", kind="article_draft", revision=10), cand("d", kind="research_plan", revision=99)]
    assert latest_draft(drafts) == 10
    assert latest_draft([cand("d", kind="research_plan", revision=3)]) is None
    assert latest_draft([]) is None
    dated = [cand("d", kind="article_draft", revision=r) for r in ("2026-01-02", "2026-01-10")]
    assert latest_draft(dated) == "2026-01-10"  # text revisions compare as text


def test_a_first_line_is_the_first_non_blank_line_shortened_to_the_limit_with_an_ellipsis():
    assert _first_line("\n\n  Find the rules\nsecond") == "Find the rules"
    assert _first_line("") == "" and _first_line("   \n ") == ""
    exact = "x" * 200
    assert _first_line(exact) == exact
    assert _first_line(exact + "y") == "x" * 199 + "…"
    assert _first_line("abcdef", limit=4) == "abc…"


def test_a_source_label_names_repository_commit_path_and_lines_or_else_every_field_sorted():
    assert _ref_label({"repo": "pi", "commit": "c0ffee", "path": "src/a.ts", "lines": "3-9"}) == "pi@c0ffee:src/a.ts:3-9"
    assert _ref_label({"repo": "pi"}) == "pi@?::"
    assert _ref_label({"url": "https://x.example/a", "accessed": "2026-01-01"}) == "accessed=2026-01-01,url=https://x.example/a"
