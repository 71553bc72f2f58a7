"""Items the budget may evict are counted only when a decision needs their size (issue 13).

The lower bound (`bounds.runs_floor`) must never exceed the exact count, and deciding on it must
change nothing a reviewer or the model sees: the same items included, with the same ranks, the
same payload; only what was never needed is left uncounted (and unreduced), and the manifest says
which counts are bounds."""

from __future__ import annotations

import copy
import random

import pytest

from bench import workload
from ctxeng.engine import assemble, bounds, parse_policy, parse_request
from ctxeng.engine.render import block_floor, block_tokens
from ctxeng.engine.tokens import TiktokenTokenizer

CREATED_AT = "2026-01-01T00:00:00Z"

TRICKY = [
    "",
    "a",
    "hello world",
    "naïve café",
    "😀-😀",
    "x😀y",
    "abc123def",
    "don't we'll THEY'RE",
    "'s's's",
    "sha256:406c5c5130e9f352fafcab74e6e399eb87feb96f004930426ef67a6e3cc04ccf",
    "١٢٣456٧",
    "12٣45",
    "über-Straße 12ß",
    "日本語のテキスト and English",
    "\n\n  indented\tcode_with_underscores = 42\r\n",
    "<<<ctxeng:block nonce=123>>> fence-like",
    "ǅemal ǈ ǋ",  # title-case letters
    "ⅫⅣ roman 2²³",
    "a\u0301b\u0301c",  # combining marks
    "\ud800lone surrogate",
]


def _alphabet_text(rng: random.Random) -> str:
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "éüßçñøåæœ",
        "日本語中文한국어",
        "١٢٣٤٥²³½Ⅻ",
        "😀🚀✓•–—",
        "\u0301\u0308",
    ]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 60)))


@pytest.fixture(scope="module")
def tokenizer():
    return TiktokenTokenizer()


def test_the_bound_is_made_for_the_bundled_encoding_and_nothing_else(tokenizer):
    assert bounds.bounds_tokens(tokenizer)
    other = TiktokenTokenizer()
    other.pre_tokenizer_pattern = r"\S+|\s+"  # a pre-tokenizer the proof does not cover
    assert not bounds.bounds_tokens(other)
    assert not bounds.bounds_tokens(object())


@pytest.mark.parametrize("text", TRICKY)
def test_the_bound_never_exceeds_the_count_on_tricky_text(tokenizer, text):
    assert bounds.runs_floor(text) <= tokenizer.encode_count(text)


def test_the_bound_never_exceeds_the_count_on_random_text_of_every_script(tokenizer):
    rng = random.Random(13)
    for _ in range(4000):
        text = _alphabet_text(rng)
        assert bounds.runs_floor(text) <= tokenizer.encode_count(text), repr(text)


def test_the_bound_counts_words_and_numbers_and_not_what_touches_other_scripts():
    assert bounds.runs_floor("alpha beta 12 gamma 345678") == 5
    assert bounds.runs_floor("naïve") == 0  # "na" and "ve" are one letter run with the ï
    assert bounds.runs_floor("abc123def") == 3


def small_request(seed: int = 21, **kw) -> dict:
    return workload.make_request(n_items=400, total_bytes=1_600_000, n_tool_pairs=8, seed=seed, **kw)


POLICY = parse_policy(workload.make_policy(16_000))


def sealed(body: dict, tokenizer):
    return assemble(parse_request(copy.deepcopy(body)), POLICY, tokenizer=tokenizer, created_at=CREATED_AT)


def unbounded() -> TiktokenTokenizer:
    tok = TiktokenTokenizer()
    tok.pre_tokenizer_pattern = None  # no bound: every item is counted at acquisition, as before
    return tok


@pytest.fixture(scope="module")
def pair():
    body = small_request()
    return sealed(body, TiktokenTokenizer()), sealed(body, unbounded())


def test_deciding_on_bounds_seals_the_same_payload_ranks_and_decisions(pair):
    bounded, counted = pair
    a, b = bounded.manifest_dict(), counted.manifest_dict()
    assert bounded.serialized_input == counted.serialized_input
    assert a["assembly"]["status"] == b["assembly"]["status"] == "ready"
    assert [(i["item_id"], i["rank"], i["tokens"]) for i in a["included"]] == [(i["item_id"], i["rank"], i["tokens"]) for i in b["included"]]
    assert a["budget"] == b["budget"]
    reasons_a = {x["item_id"]: x["reason"] for x in a["excluded"]}
    reasons_b = {x["item_id"]: x["reason"] for x in b["excluded"]}
    assert reasons_a.keys() == reasons_b.keys()
    for item_id, reason in reasons_a.items():
        # An item whose reduction would have failed is evicted unreduced when even its bound does not fit.
        assert reason == reasons_b[item_id] or (reason, reasons_b[item_id]) == ("budget_evicted", "transform_blocked")


def test_most_evictions_need_no_count_and_no_reduction(pair):
    bounded, counted = pair
    a, b = bounded.manifest_dict(), counted.manifest_dict()
    bound = [x for x in a["excluded"] if x["token_count"] == "lower_bound"]
    evicted = [x for x in a["excluded"] if x["reason"] == "budget_evicted"]
    assert len(bound) > len(evicted) / 2 > 20
    assert len(a["transforms"]) < len(b["transforms"])
    reduced = {i for t in a["transforms"] for i in t["input_item_ids"]}
    for x in bound:
        assert x["item_id"] not in reduced  # never reduced, never counted
        if x["reason"] == "budget_evicted":
            assert f"needs at least {x['tokens']} (a lower bound; not counted)" in x["detail"]
    assert all(x["token_count"] == "exact" for x in b["excluded"])
    assert all(c["token_count"] == "exact" for c in b["candidate_items"])


def test_every_recorded_bound_is_at_most_the_count_it_stands_for(pair):
    bounded, counted = pair
    a, b = bounded.manifest_dict(), counted.manifest_dict()
    exact_received = {c["item_id"]: c["estimated_tokens"] for c in b["candidate_items"]}
    exact_excluded = {x["item_id"]: x["tokens"] for x in b["excluded"]}
    bounds_seen = 0
    for c in a["candidate_items"]:
        if c["token_count"] == "lower_bound":
            bounds_seen += 1
            assert 0 < c["estimated_tokens"] <= exact_received[c["item_id"]]
        else:
            assert c["estimated_tokens"] == exact_received[c["item_id"]]
    for x in a["excluded"]:
        if x["token_count"] == "lower_bound":
            assert x["tokens"] <= exact_excluded[x["item_id"]]
    assert bounds_seen > 100


def test_a_block_bound_is_at_most_its_count_for_every_workload_item(tokenizer):
    from ctxeng.engine.pipeline import assemble as run

    body = small_request(seed=5)
    seen = []
    import ctxeng.engine.budget as budget_module

    real = budget_module.allocate

    def spy(asm, **options):
        seen.append(asm)
        return real(asm, **options)

    budget_module.allocate = spy
    try:
        run(parse_request(copy.deepcopy(body)), POLICY, tokenizer=tokenizer, created_at=CREATED_AT)
    finally:
        budget_module.allocate = real
    (asm,) = seen
    checked = 0
    for cand in asm.candidates:
        if cand.role.value != "control":
            assert block_floor(asm, cand) <= block_tokens(asm, cand), cand.item_id
            checked += 1
    assert checked > 200


def test_ties_on_every_factor_but_the_cost_are_ordered_by_counts_when_the_budget_needs_them():
    body = small_request(seed=8)
    for n, cand in enumerate(body["candidates"]):
        if cand["producer"] == "bench-workload/v1" and cand.get("call_id") is None:
            cand["relevance"] = 0.5 if n % 2 else 0.7  # two large tie groups, ordered by retrieval_cost
    a = sealed(body, TiktokenTokenizer()).manifest_dict()
    b = sealed(body, unbounded()).manifest_dict()
    assert [(i["item_id"], i["rank"]) for i in a["included"]] == [(i["item_id"], i["rank"]) for i in b["included"]]
    assert {x["item_id"]: x["reason"] for x in a["excluded"]}.keys() == {x["item_id"]: x["reason"] for x in b["excluded"]}.keys()
    assert any(x["token_count"] == "lower_bound" for x in a["excluded"])


def test_remembered_runs_stay_within_their_bound_and_go_with_their_tokenizer(monkeypatch):
    import gc

    monkeypatch.setattr(bounds, "RUNS_KEPT", 50)
    tok = TiktokenTokenizer()
    body = small_request(seed=4)
    first = sealed(body, tok).manifest_dict()
    assert 0 < len(bounds._RUNS[tok]) <= 50  # cleared when full (each item adds its header and its content)
    assert sealed(body, tok).manifest_dict() == first  # what is remembered changes no result
    before = len(bounds._RUNS)
    del tok
    gc.collect()
    assert len(bounds._RUNS) == before - 1


def test_every_reduction_holds_the_text_its_bound_counts_on(monkeypatch):
    """The bound of an item whose source limit is pending counts the runs of text every reduction
    writes (`source_limits.reduced_fixed_text`): each line of it is in every reducer's output."""
    from ctxeng.engine import source_limits
    from ctxeng.engine.vocabulary import SourceLimitMode

    seen: list[tuple[str, str, str]] = []
    real = source_limits.begin_transform

    def spy(asm, cand, out, assertions, ttype, objective, transformer, **kw):
        mode = SourceLimitMode(transformer.split("/")[1]) if transformer.startswith("source-limit/") else None
        if mode is not None:  # the item as received: begin_transform replaces it by the reduction
            seen.append((mode.value, source_limits.reduced_fixed_text(mode, cand), out))
        return real(asm, cand, out, assertions, ttype, objective, transformer, **kw)

    monkeypatch.setattr(source_limits, "begin_transform", spy)
    sealed(small_request(seed=12), unbounded())  # every over-limit item reduced, as before bounds
    assert {mode for mode, _, _ in seen} == {m.value for m in SourceLimitMode if m != SourceLimitMode.WHOLE}
    for mode, fixed, out in seen:
        for line in fixed.split("\n"):
            assert line and line in out, (mode, line)
