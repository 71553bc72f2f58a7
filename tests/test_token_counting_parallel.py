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
