"""A large batch of uncounted texts is counted on a thread pool, with the counts one thread gives."""

from __future__ import annotations

import random

from ctxeng.engine import tokens


def _texts(n: int) -> dict[str, str]:
    rng = random.Random(13)
    words = ["def", "  return", "{\"k\": 1}", "FAILED test_x", "naïve", "数据", "\n", "<tag>", "1234567", " "]
    return {f"k{i}": "".join(rng.choice(words) for _ in range(rng.randint(0, 400))) for i in range(n)}


def test_the_parallel_path_gives_the_sequential_counts(monkeypatch):
    texts = _texts(300)
    sequential = {k: tokens.TiktokenTokenizer().encode_count(t) for k, t in texts.items()}
    used = []
    pool = tokens._pool()
    monkeypatch.setattr(tokens, "_pool", lambda: used.append(1) or pool)
    monkeypatch.setattr(tokens, "PARALLEL_MIN_CHARS", 1)
    monkeypatch.setattr(tokens.os, "cpu_count", lambda: 3)
    counted = tokens.TiktokenTokenizer().count_many(texts)
    assert used and counted == sequential and list(counted) == list(texts)


def test_a_small_batch_stays_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(tokens, "_pool", lambda: (_ for _ in ()).throw(AssertionError("pool used")))
    texts = _texts(20)
    assert tokens.TiktokenTokenizer().count_many(texts) == {
        k: tokens.TiktokenTokenizer().encode_count(t) for k, t in texts.items()
    }


class _Recording(tokens.TiktokenTokenizer):
    """Records every text it encodes (from any thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[str] = []

    def encode_count(self, text: str) -> int:
        self.encoded.append(text)
        return super().encode_count(text)


def test_counts_started_ahead_are_the_counts_asked_for_later_and_each_text_is_encoded_once(monkeypatch):
    texts = _texts(120)
    sequential = {k: tokens.TiktokenTokenizer().encode_count(t) for k, t in texts.items()}
    monkeypatch.setattr(tokens, "PARALLEL_MIN_CHARS", 1)
    monkeypatch.setattr(tokens.os, "cpu_count", lambda: 2)
    tok = _Recording()
    tok.count_ahead(texts)
    assert tok._ahead  # started on the pool
    asked = list(texts)[:80]
    assert {k: tok.count_keyed(k, texts[k]) for k in asked} == {k: sequential[k] for k in asked}
    tok.settle_ahead()  # the 40 nobody asked for are kept, not dropped or recounted
    assert not tok._ahead
    assert {k: tok.cached(k) for k in texts} == sequential
    assert sorted(tok.encoded) == sorted(texts.values())


def test_a_small_batch_is_not_counted_ahead(monkeypatch):
    monkeypatch.setattr(tokens, "_pool", lambda: (_ for _ in ()).throw(AssertionError("pool used")))
    tok = tokens.TiktokenTokenizer()
    tok.count_ahead(_texts(20))
    assert not tok._ahead


def test_an_assembly_counting_ahead_seals_what_one_counting_in_turn_seals(monkeypatch):
    """The source-limit stage counts its excerpts ahead on the pool; the manifest and payload are
    those of a tokenizer that counts every text when asked, on the calling thread."""
    from bench import workload
    from ctxeng.engine import assemble, parse_policy, parse_request

    request = workload.make_request(n_items=300, total_bytes=900_000)
    policy = parse_policy(workload.make_policy())
    monkeypatch.setattr(tokens, "PARALLEL_MIN_CHARS", 1)
    monkeypatch.setattr(tokens.os, "cpu_count", lambda: 2)
    ahead = _Recording()
    fast = assemble(parse_request(workload.dumps(request)), policy, tokenizer=ahead, created_at="2026-01-01T00:00:00Z")

    class InTurn(tokens.TiktokenTokenizer):
        count_ahead = None  # no support: every count is made when asked
        count_many = None

    slow = assemble(parse_request(workload.dumps(request)), policy, tokenizer=InTurn(), created_at="2026-01-01T00:00:00Z")
    assert fast.manifest.transforms and any(t.trigger == "over_source_limit" for t in fast.manifest.transforms)
    assert fast.manifest_dict() == slow.manifest_dict()
    assert fast.serialized_input == slow.serialized_input
    assert not ahead._ahead


def test_an_error_in_the_source_limit_stage_leaves_no_count_started_ahead(monkeypatch):
    """A long-lived tokenizer (a worker's) must not keep futures from an assembly that failed midway."""
    import pytest

    from bench import workload
    from ctxeng.engine import assemble, parse_policy, parse_request, source_limits

    monkeypatch.setattr(tokens, "PARALLEL_MIN_CHARS", 1)
    monkeypatch.setattr(tokens.os, "cpu_count", lambda: 2)

    def broken(asm, started):
        raise RuntimeError("a reducer bug")

    monkeypatch.setattr(source_limits, "finish_transform", broken)
    tok = _Recording()
    request = parse_request(workload.dumps(workload.make_request(n_items=120, total_bytes=400_000)))
    with pytest.raises(RuntimeError, match="a reducer bug"):
        assemble(request, parse_policy(workload.make_policy()), tokenizer=tok)
    assert tok.encoded and not tok._ahead
