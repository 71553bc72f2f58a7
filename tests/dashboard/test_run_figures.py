"""The run page's figures over the run count only what they say they count (issue 52): "over the
n of m ready steps" never has n > m, whatever a blocked step's manifest records."""

from __future__ import annotations

from types import SimpleNamespace

from manifests.dashboard_selectors import run_cache_eligible, run_cache_hits


def _step(status: str, **figures) -> SimpleNamespace:
    return SimpleNamespace(status=status, **{"payload_text_tokens": None, "cache_eligible_tokens": None,
                                             "cache_compared_with": "service",
                                             "usage_input": None, "usage_cached": None, **figures})


def test_a_blocked_steps_recorded_zeros_are_not_counted_as_a_ready_step():
    steps = [_step("ready", payload_text_tokens=1000, cache_eligible_tokens=600),
             _step("blocked", payload_text_tokens=0, cache_eligible_tokens=0)]
    figures = run_cache_eligible(steps)
    assert (figures["counted"], figures["steps"]) == (1, 1)
    assert figures["percent"] == 60.0


def test_the_provider_cached_ratio_counts_the_ready_steps_reports_only():
    steps = [_step("ready", usage_input=400, usage_cached=100), _step("ready"),
             _step("blocked", usage_input=50, usage_cached=50)]
    figures = run_cache_hits(steps)
    assert (figures["reported"], figures["steps"]) == (1, 2)
    assert figures["percent"] == 25.0
