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
