"""The windows over-limit items were reduced to are remembered per tokenizer, across assemblies:
the agent's next step re-sends most of them unchanged. Remembering changes nothing but the work:
the next step seals exactly what a tokenizer that never saw the first step seals."""

from __future__ import annotations

import copy
import gc

import pytest

from bench import workload
from ctxeng.engine import assemble, parse_policy, parse_request, source_limits
from ctxeng.engine.tokens import TiktokenTokenizer

POLICY = parse_policy(workload.make_policy(16_000))
CREATED_AT = "2026-01-01T00:00:00Z"  # the only clock in a manifest


def sealed(body: dict, tokenizer) -> tuple[dict, dict | None]:
    result = assemble(parse_request(copy.deepcopy(body)), POLICY, tokenizer=tokenizer, created_at=CREATED_AT)
    return result.manifest_dict(), result.serialized_input


def excerpts(manifest: dict) -> int:
    return sum(t["transformer_version"].startswith(("source-limit/excerpt", "source-limit/relevant")) for t in manifest["transforms"])


@pytest.fixture
def estimates(monkeypatch):
    """How many windows the reducers estimate (the work remembering saves)."""
    made = []
    for name in ("code_window", "section_window"):
        real = getattr(source_limits, name)
        monkeypatch.setattr(source_limits, name, lambda asm, cand, max_tokens, real=real: made.append(cand.item_id) or real(asm, cand, max_tokens))
    return made


@pytest.fixture
def first_step():
    return workload.make_request(n_items=160, total_bytes=900_000, n_tool_pairs=10, seed=11)


def test_the_next_step_seals_what_a_fresh_tokenizer_seals_and_estimates_only_the_changed_items(first_step, estimates):
    nxt = workload.next_step(first_step, changed=0.1)
    changed = {c["item_id"] for c, before in zip(nxt["candidates"], first_step["candidates"], strict=True)
               if c["content"] != before["content"]}
    warm = TiktokenTokenizer()
    sealed(first_step, warm)
    reduced = len(estimates)
    assert reduced > 20  # the workload has code and web items over their limits

    estimates.clear()
    again = sealed(nxt, warm)
    assert excerpts(again[0]) >= reduced - len(changed)
    assert set(estimates) <= changed and len(estimates) < reduced / 4

    assert again == sealed(nxt, TiktokenTokenizer())


def test_new_decision_terms_are_a_new_window(first_step, estimates):
    warm = TiktokenTokenizer()
    sealed(first_step, warm)
    asked = copy.deepcopy(first_step)
    asked["step_id"] = "step-next"
    task = next(c for c in asked["candidates"] if c["intended_role"] == "task_intent")
    task["content"] += " Focus on the retry backoff and the cache invalidation paths."
    task["content_hash"] = workload.sha256(task["content"])

    estimates.clear()
    again = sealed(asked, warm)
    assert len(estimates) >= excerpts(again[0]) > 20  # every window estimated afresh
    assert again == sealed(asked, TiktokenTokenizer())


def test_an_item_reduced_under_a_looser_limit_is_a_new_window(first_step, estimates):
    warm = TiktokenTokenizer()
    sealed(first_step, warm)
    doc = workload.make_policy(16_000)
    # Looser, so a window remembered under the default limit would still be within it (and the
    # count that confirms a remembered window would not catch it being the wrong one).
    doc["source_limits"]["repository"]["max_tokens"] = 1500
    looser = parse_policy(doc)

    estimates.clear()
    result = assemble(parse_request(copy.deepcopy(first_step)), looser, tokenizer=warm, created_at=CREATED_AT)
    fresh = assemble(parse_request(copy.deepcopy(first_step)), looser, tokenizer=TiktokenTokenizer(), created_at=CREATED_AT)
    assert any(t.transformer_version.startswith("source-limit/excerpt") for t in result.manifest.transforms)
    assert (result.manifest_dict(), result.serialized_input) == (fresh.manifest_dict(), fresh.serialized_input)



def test_a_remembered_window_over_its_budget_is_estimated_afresh(first_step, estimates):
    """Counts could differ from the ones a window was trimmed by (a shared cache, say): a
    remembered window is used only when its count confirms it is within budget."""
    warm = TiktokenTokenizer()
    sealed(first_step, warm)
    known = source_limits._KNOWN[warm]
    content = {workload.sha256(c["content"]): c["content"] for c in first_step["candidates"]}
    widened = [key for key in known if key[0] == "excerpt_with_line_range"
               and warm.count(content[key[1]]) > source_limits.window_budget(key[3])]
    for key in widened:
        known[key] = (0, 10**6)  # every line of the item, over its budget
    assert len(widened) > 10

    estimates.clear()
    again = sealed(first_step, warm)
    assert len(estimates) == len(widened)
    assert again == sealed(first_step, TiktokenTokenizer())


def test_what_is_remembered_stays_bounded(first_step, monkeypatch):
    monkeypatch.setattr(source_limits, "KNOWN_WINDOWS", 8)
    warm = TiktokenTokenizer()
    first = sealed(first_step, warm)
    assert excerpts(first[0]) > 8
    assert 0 < len(source_limits._KNOWN[warm]) <= 8
    assert sealed(first_step, warm) == first


def test_a_tokenizer_remembers_nothing_once_it_is_gone(first_step):
    warm = TiktokenTokenizer()
    sealed(first_step, warm)
    assert warm in source_limits._KNOWN
    before = len(source_limits._KNOWN)
    del warm
    gc.collect()
    assert len(source_limits._KNOWN) == before - 1
