"""The budget counts ahead once its bounds stop settling items (issue 13, speed).

When a walk of the budget has had to count many items one by one, it hands the next uncounted
items whose bounds could fit to the tokenizer's pool (`budget._Budget._count_ahead`), so their
counts run on another core while this thread reduces the item at hand. That is a guess about
what the walk will ask for: it must change nothing the assembly decides or records, and a count
the walk never asked for must not outlive the assembly. The oracle is the same assembly with
counting ahead turned off.
"""

from __future__ import annotations

import copy

import pytest

from bench import workload
from ctxeng.engine import assemble, budget, parse_policy, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer

CREATED_AT = "2026-01-01T00:00:00Z"
POLICY = parse_policy(workload.make_policy(24_000))


class Recording(TiktokenTokenizer):
    """The real tokenizer, noting which counts were started ahead and which of those were asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []
        self.handed: list[int] = []  # characters handed over by each call
        self.asked_ahead = 0

    def count_ahead(self, texts, **limits):
        keys = super().count_ahead(texts, **limits)
        self.started += keys
        self.handed.append(sum(map(len, texts.values())))
        return keys

    def count_keyed(self, key, text):
        self.asked_ahead += key in self._ahead
        return super().count_keyed(key, text)


@pytest.fixture(scope="module")
def steps():
    # 300 items over 1.2 MB under a 24k context: each step leaves the evidence partition room its
    # bounds cannot settle, so its walk counts well over AHEAD_AFTER items one by one.
    request = workload.make_request(n_items=300, total_bytes=1_200_000, n_tool_pairs=8, seed=21)
    return [step for k, step in enumerate(workload.step_run(request, 3, changed=0.10)) if k in (0, 2)]


def _sealed(body: dict, tokenizer: TiktokenTokenizer):
    return assemble(parse_request(copy.deepcopy(body)), POLICY, tokenizer=tokenizer, created_at=CREATED_AT)


@pytest.mark.parametrize("step", [0, 1], ids=["first step", "third step"])
def test_counting_ahead_changes_nothing_the_assembly_decides_or_records(steps, step, monkeypatch):
    ahead = Recording()
    with_ahead = _sealed(steps[step], ahead)
    monkeypatch.setattr(budget, "AHEAD_AFTER", 10**9)
    plain = Recording()
    without = _sealed(steps[step], plain)

    assert len(ahead.started) > budget.AHEAD_FIRST // 2  # it did count ahead
    assert ahead.asked_ahead > len(ahead.started) / 2  # and the walk used those counts
    assert plain.started == []
    assert with_ahead.manifest_dict() == without.manifest_dict()
    assert with_ahead.serialized_input == without.serialized_input


def test_no_count_started_ahead_outlives_its_assembly(monkeypatch):
    # 500 smaller items (2.4 kB on average): the walk guesses at many more items than it goes on to
    # count. (At 1.5 MB, before the fences shrank, this walk counted ahead; with today's 11-36-token
    # fences the bounds settle every unit of that request, so nothing is guessed at there.)
    body = workload.make_request(n_items=500, total_bytes=1_200_000, n_tool_pairs=8, seed=21)
    monkeypatch.setattr(budget, "AHEAD_FIRST", 1024)
    tokenizer = Recording()
    guessed = _sealed(body, tokenizer)
    assert tokenizer.asked_ahead < len(tokenizer.started) / 2  # most were never asked for
    assert tokenizer._ahead == {}
    monkeypatch.setattr(budget, "AHEAD_AFTER", 10**9)
    assert guessed.manifest_dict() == _sealed(body, TiktokenTokenizer()).manifest_dict()


def test_a_count_let_go_before_it_ran_is_counted_when_asked_for():
    tokenizer = TiktokenTokenizer()
    texts = {f"k{i}": f"text number {i} " * (400 + i) for i in range(64)}
    keys = tokenizer.count_ahead(texts, min_chars=0, chunk=4, threads=1)
    assert keys == list(texts)
    # Let go of one key of each pool task: the tasks still queued are cancelled, with the other
    # three keys each holds still waiting on them.
    tokenizer.settle_ahead(keys[::4], wait=False)
    assert set(tokenizer._ahead) == set(keys) - set(keys[::4])
    for key, text in texts.items():
        assert tokenizer.count_keyed(key, text) == tokenizer.encode_count(text)
    assert tokenizer._ahead == {}


def test_small_items_are_counted_when_asked_not_ahead(monkeypatch):
    """A pool task costs more than counting an item of a few hundred bytes: only items of
    AHEAD_ITEM_CHARS or more are counted ahead (10,000 small items ran slower with all of them)."""
    # 600 bytes an item on average, well under AHEAD_ITEM_CHARS (at 800 kB the compact fences let
    # the bounds settle the walk before it counted AHEAD_AFTER items one by one).
    body = workload.make_request(n_items=2_000, total_bytes=1_200_000, n_tool_pairs=8, seed=77, example=False)
    default = budget.AHEAD_ITEM_CHARS
    monkeypatch.setattr(budget, "AHEAD_ITEM_CHARS", 0)
    every_size = Recording()
    _sealed(body, every_size)
    assert len(every_size.started) > budget.AHEAD_FIRST  # this walk would count them ahead
    monkeypatch.setattr(budget, "AHEAD_ITEM_CHARS", default)
    sized = Recording()
    _sealed(body, sized)
    assert sized.started == []


def test_a_guess_hands_over_at_most_about_ahead_max_chars_of_text(steps, monkeypatch):
    uncapped = Recording()
    _sealed(steps[1], uncapped)
    monkeypatch.setattr(budget, "AHEAD_MAX_CHARS", 60_000)
    capped = Recording()
    sealed = _sealed(steps[1], capped)
    # Without the cap a guess hands over 100-250 kB here; with it, the cap and the one item (a
    # few kB) that reached it.
    assert max(uncapped.handed) > 80_000
    assert 60_000 <= max(capped.handed) < 80_000
    assert capped.asked_ahead > len(capped.started) / 2
    monkeypatch.setattr(budget, "AHEAD_AFTER", 10**9)
    assert sealed.manifest_dict() == _sealed(steps[1], TiktokenTokenizer()).manifest_dict()
