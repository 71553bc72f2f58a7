"""tests/mutation/xdist_stats.py: before each test of mutmut's statistics run, the product's
per-process caches are empty, so every test that needs a cached value is recorded as computing it
(a mutant of a cached function is then judged by all of them, not by the first caller alone)."""

from __future__ import annotations

import functools

import pytest

from ctxeng.engine import memo
from ctxeng.sdk import _shell
from tests.mutation import xdist_stats


@functools.cache
def _not_the_products() -> int:
    return 1


@pytest.fixture
def filled():
    kept = memo.Memo(4)
    _shell.effects("cat notes.txt")
    kept.put("key", "value")
    _not_the_products()
    assert _shell._effects.cache_info().currsize > 0 and len(kept) == 1
    yield kept
    memo._ALL.remove(kept)


def test_the_memos_and_the_products_functools_caches_are_emptied(filled):
    emptied = xdist_stats.forget_product_caches()

    assert _shell._effects.cache_info().currsize == 0
    assert len(filled) == 0
    assert emptied >= 2  # _shell._effects and ctxeng.engine.secrets' caches at least
    assert _not_the_products.cache_info().currsize == 1  # a test module's cache is not the product's


@pytest.mark.parametrize(("mode", "emptied"), [("stats", True), ("", False), ("ctxeng.x__mutmut_1", False)])
def test_only_the_statistics_run_empties_them_before_a_test(filled, monkeypatch, mode, emptied):
    monkeypatch.setenv("MUTANT_UNDER_TEST", mode)

    xdist_stats.pytest_runtest_setup(None)

    assert (_shell._effects.cache_info().currsize == 0) is emptied
    assert (len(filled) == 0) is emptied
