"""The order `make test` hands its tests to pytest-xdist (tests/conftest.py): the tests that wait
go first in each worker's run, and no test is lost or repeated."""

from __future__ import annotations

import json

import pytest

from tests.conftest import fastest_first, waiting_tests_first


def first_split(n: int, workers: int) -> list[int]:
    """pytest-xdist worksteal's first split of n pending tests between idle workers."""
    sizes, left = [], n
    for worker in range(workers):
        sizes.append(left // (workers - worker))
        left -= sizes[-1]
    return sizes


def runs(ordered: list, workers: int) -> list[list]:
    runs, start = [], 0
    for size in first_split(len(ordered), workers):
        runs.append(ordered[start : start + size])
        start += size
    return runs


@pytest.mark.parametrize(("n", "waiting", "workers"), [(1497, 40, 4), (1497, 40, 2), (12, 3, 4), (103, 7, 3)])
def test_each_worker_starts_with_its_share_of_the_waiting_tests(n, waiting, workers):
    items = [f"w{i}" if i % (n // waiting) == 0 and i // (n // waiting) < waiting else f"t{i}" for i in range(n)]
    slow = [item for item in items if item.startswith("w")]

    ordered = waiting_tests_first(items, workers, is_waiting=lambda item: item.startswith("w"))

    assert sorted(ordered) == sorted(items)
    for worker, run in enumerate(runs(ordered, workers)):
        heads = slow[worker::workers]
        assert run[: len(heads)] == heads, (worker, run[:5])
        assert not any(item.startswith("w") for item in run[len(heads):])


def test_the_other_tests_keep_their_order_and_one_worker_gets_the_waiting_tests_first():
    items = ["a", "W1", "b", "c", "W2", "d"]
    is_waiting = str.isupper

    assert waiting_tests_first(items, 1, is_waiting) == ["W1", "W2", "a", "b", "c", "d"]
    assert waiting_tests_first(items, 2, is_waiting) == ["W1", "a", "b", "W2", "c", "d"]


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.fixturenames = ()

    def get_closest_marker(self, name: str) -> None:
        return None


def test_a_mutant_runs_its_fastest_tests_first_and_the_waiting_and_untimed_ones_after():
    items = [_Item(n) for n in ("t::slow", "t::w_fast", "t::untimed", "t::fast", "t::mid", "t::also_fast")]
    durations = {"t::slow": 9.0, "t::w_fast": 0.01, "t::fast": 0.1, "t::mid": 1.0, "t::also_fast": 0.1}
    ordered = fastest_first(items, durations, is_waiting=lambda item: item.nodeid.startswith("t::w"))
    assert [i.nodeid for i in ordered] == ["t::fast", "t::also_fast", "t::mid", "t::slow", "t::untimed", "t::w_fast"]


def test_under_a_mutant_the_collection_is_ordered_by_the_statistics_run(tmp_path, monkeypatch):
    from tests import conftest

    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": {"a::x": 2.0, "a::y": 0.5}}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTANT_UNDER_TEST", "ctxeng.engine.budget.x_f__mutmut_3")
    items = [_Item("a::x"), _Item("a::y")]

    class _Config:
        workerinput = {"workercount": 1}

    monkeypatch.setattr(conftest, "_deselect_postgres_only", lambda config, items: None)
    conftest.pytest_collection_modifyitems(_Config(), items)
    assert [i.nodeid for i in items] == ["a::y", "a::x"]
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    items = [_Item("a::x"), _Item("a::y")]
    conftest.pytest_collection_modifyitems(_Config(), items)
    assert [i.nodeid for i in items] == ["a::x", "a::y"]
