"""research-agent lends the room a minimum holds but cannot use (`budget.borrowing:
lend_unused_minimums`, docs/starter-policies.md), and lending never brings back what the selection
excluded.

The oracles are written by hand from the starter's shares at 16,000 tokens (reserve 12.5% = 2000,
overhead and margin 3.125% = 500 each, so 13,000 tokens of usable input; minimums control 1000,
state 1500, direct_evidence 4000, recent_tool_pairs 2000, conversation 800) and from the sizes of
the texts the test gives, never from the manifest the engine produced."""

from __future__ import annotations

from ctxeng import sdk

COMMIT = "53fa77ccd8a279eb87e92294ef3687b03ff80112"
MODEL = {"name": "gpt-4o", "provider": "openai", "context_limit": 16_000}
MESSAGES = [{"role": "system", "content": "You research agent frameworks."}, {"role": "user", "content": "Compare the notes."}]
USABLE = 16_000 - 2_000 - 500 - 500
WORDS = 600  # each evidence text: 600 words of 4 o200k tokens ("w3x17"), 2400 tokens, plus its fence


def state() -> list:
    return [sdk.repository_manifest({"pi": COMMIT}), sdk.hard_constraints(["Cite fixed revisions only."]),
            sdk.open_items({"OI-1": "compare the notes"})]


def note(i: int) -> sdk.Item:
    return sdk.file(f"notes/{i}.md", " ".join(f"w{i}x{k}" for k in range(WORDS)), revision=1, kind="evidence")


def test_the_minimums_a_step_cannot_use_are_lent_to_the_evidence_being_evicted():
    notes = [note(i) for i in range(7)]
    step = sdk.Session("research-agent", model=MODEL).step(MESSAGES, items=state() + notes)
    assert step.status == "ready"
    kept = [r for r in step.manifest["included"] if r["kind"] == "evidence"]
    # The oracle's premise: each note costs 2400-2450 tokens (its words and a fence under 50).
    assert all(4 * WORDS <= r["tokens"] <= 4 * WORDS + 50 for r in kept)
    # The step has no tool pairs (recent_tool_pairs' 2000 unused), one short user turn (conversation
    # under 50 of 800), control (system prompt, goal, manifest, constraints) under 300 of 1000,
    # state (stage, open items) under 100 of 1500. With those minimums held back, evidence would
    # have at most 13000 - 2000 - 750 - 700 - 1400 = 8150 tokens: 3 notes. Lent, it has the whole
    # input less what the small parts and the framing take (under 500): at least 12500, so
    # 12500 // 2450 = 5 notes, and at most 13000 // 2400 = 5.
    assert (USABLE - 2000 - 750 - 700 - 1400) // (4 * WORDS) == 3
    assert (USABLE - 500) // (4 * WORDS + 50) == USABLE // (4 * WORDS) == 5
    assert len(kept) == 5
    evicted = {r["item_id"]: r["reason"] for r in step.manifest["excluded"]}
    assert sorted(evicted.values()) == ["budget_evicted", "budget_evicted"]
    assert step.manifest["budget"]["borrowing"] == "lend_unused_minimums"


def test_room_to_spare_never_brings_back_a_stale_or_out_of_scope_item():
    old = sdk.file("notes/a.md", "Old notes: pi sorts tool results.", revision=1, kind="evidence")
    new = sdk.file("notes/a.md", "New notes: pi keeps the call order.", revision=2, kind="evidence")
    elsewhere = sdk.file("notes/b.md", "Another tenant's notes.", revision=1, kind="evidence", scope="tenant-z/project-q")
    step = sdk.Session("research-agent", model=MODEL).step(MESSAGES, items=state() + [old, new, elsewhere])
    assert step.status == "ready"
    # A dozen short texts in 13,000 tokens: every minimum has room it cannot use, lent or not.
    assert step.manifest["budget"]["estimated_used"] < USABLE // 10
    reasons = {r["item_id"]: r["reason"] for r in step.manifest["excluded"]}
    assert reasons == {old.item_id: "stale_revision", elsewhere.item_id: "permission_denied"}
    assert new.item_id in {r["item_id"] for r in step.manifest["included"]}


def page(i: int, words: int, **fields) -> sdk.Item:
    return sdk.web(f"https://example.org/pages/{i}", " ".join(f"w{i}x{k}" for k in range(words)), **fields)


def test_a_web_page_without_a_revision_is_not_lent_room_and_a_dated_one_is():
    # 14 pages of 200 words (800 tokens each, under the starter's 1000-token web source limit, so
    # none is cut) in direct_evidence. Undated, a page keeps only what preserve_all_minimums would
    # give it: the other minimums held back (recent_tool_pairs 2000, control 700, state 1400,
    # conversation 750 at least, as in the first test) leave evidence at most 8150 tokens, 10 pages.
    # Dated (`revision`: the page's Last-Modified), lent: 14 pages are under 12,000 tokens, all fit.
    undated = sdk.Session("research-agent", model=MODEL).step(MESSAGES, items=state() + [page(i, 200) for i in range(14)])
    dated = sdk.Session("research-agent", model=MODEL).step(
        MESSAGES, items=state() + [page(i, 200, revision="2026-12-01T08:00:00Z") for i in range(14)])
    assert undated.status == dated.status == "ready"
    kept = {name: [r for r in step.manifest["included"] if r["kind"] == "web_page"] for name, step in (("undated", undated), ("dated", dated))}
    assert all(800 <= r["tokens"] <= 850 for r in kept["undated"] + kept["dated"])
    assert (USABLE - 2000 - 700 - 1400 - 750) // 800 == 10
    assert 0 < len(kept["undated"]) <= 10
    assert len(kept["dated"]) == 14
    assert undated.manifest["budget"]["partitions"]["direct_evidence"]["borrowed"] == 0
    assert dated.manifest["budget"]["partitions"]["direct_evidence"]["borrowed"] > 0
    details = [r["detail"] for r in undated.manifest["excluded"]]
    assert len(details) == 14 - len(kept["undated"])
    assert all("not lent to a web page without a revision" in d for d in details)


def test_a_page_read_by_a_url_tool_is_not_lent_room():
    # Seven results of ~2,400 tokens each (a pair: result, fence and the call, under 2,480). A tool
    # declared `sdk.reads("url")` reads web pages no revision dates: its pairs get no lent room, so
    # at most what the other minimums leave (direct_evidence 4000 unused, control 700, state 1400,
    # conversation 750 at least): 2 pairs. An undeclared tool's results are not pages and are lent
    # room: at least (13000 - 500) // 2480 = 5 pairs, at most 13000 // 2400 = 5.
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "fetch_url", "arguments": f'{{"url": "https://example.org/pages/{i}"}}'}} for i in range(7)]
    messages = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": calls}] + [
        {"role": "tool", "tool_call_id": f"call_{i}", "content": " ".join(f"w{i}x{k}" for k in range(WORDS))} for i in range(7)]
    pages = sdk.Session("research-agent", model=MODEL, tools={"fetch_url": sdk.reads("url")}).step(messages, items=state())
    results = sdk.Session("research-agent", model=MODEL).step(messages, items=state())
    assert pages.status == results.status == "ready"
    kept = {name: [p for p in step.manifest["tool_pairs"] if p["decision"] == "included"] for name, step in (("pages", pages), ("results", results))}
    assert all(4 * WORDS <= p["tokens"] <= 4 * WORDS + 80 for p in kept["pages"] + kept["results"])
    assert (USABLE - 4000 - 700 - 1400 - 750) // (4 * WORDS) == 2
    assert 0 < len(kept["pages"]) <= 2
    assert (USABLE - 500) // (4 * WORDS + 80) == USABLE // (4 * WORDS) == 5
    assert len(kept["results"]) == 5
