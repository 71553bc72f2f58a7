"""bench.step_traces' memory row runs a generated session in a child and reports what it keeps:
a step at every `every`-th call, the whole history last, and the bounded caches beside it."""

from __future__ import annotations

from bench.step_traces import memory_rows


def test_the_memory_row_runs_a_step_at_every_nth_call_and_reports_what_the_session_keeps():
    [row] = memory_rows(calls=6, every=3)
    data = row.data
    assert data["steps"] == 2  # after the 3rd and the 6th call
    assert data["messages"] == 2 + 2 * 6  # system, user, then a call and its result each
    assert data["seen_at"] == data["messages"]
    assert data["retired_bytes"] > 0  # the first step, kept pickled once the second was made
    assert data["peak_kb"] >= data["base_kb"] > 0
    assert data["status"] == "ready"
    assert "6-call session (2 steps, every 3th call" in row.name
