"""The order `make test` hands its tests to pytest-xdist (tests/conftest.py): the tests that wait
go first in each worker's run, and no test is lost or repeated."""

from __future__ import annotations

import pytest

from tests.conftest import waiting_tests_first


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
