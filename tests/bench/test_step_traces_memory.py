"""bench.step_traces' memory rows run a generated session in a child and report what it keeps:
a step at every `every`-th call, the whole history last, and the bounded caches beside it; once
with the session's default `keep_steps` and once keeping every step's contents."""

from __future__ import annotations

from bench.step_traces import memory_rows
from ctxeng.sdk._session import KEEP_STEPS


def test_the_memory_rows_run_a_step_at_every_nth_call_and_report_what_the_session_keeps():
    default, every_step = memory_rows(calls=6, every=3)
    for row in (default, every_step):
        data = row.data
        assert data["steps"] == 2  # after the 3rd and the 6th call
        assert data["messages"] == 2 + 2 * 6  # system, user, then a call and its result each
        assert data["seen_at"] == data["messages"]
        assert data["retired_bytes"] > 0  # the first step, kept pickled once the second was made
        assert data["peak_kb"] >= data["base_kb"] > 0
        assert data["status"] == "ready"
        assert "6-call session (2 steps, every 3th call" in row.name
    assert (default.data["keep_steps"], every_step.data["keep_steps"]) == (KEEP_STEPS, None)
    assert "keep_steps=None" in every_step.name and f"keep_steps={KEEP_STEPS}" in default.name
