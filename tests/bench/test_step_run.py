"""The storage benchmark's agent run: each step re-fetches ~10% of the candidates (no timing here)."""

from __future__ import annotations

from bench import workload


def test_each_step_of_the_run_changes_about_a_tenth_of_the_candidates_under_a_new_step_id():
    first = workload.make_request(n_items=400, total_bytes=80_000, n_tool_pairs=8)
    steps = list(workload.step_run(first, 4, changed=0.10))
    assert steps[0] is first and len({s["step_id"] for s in steps}) == 4
    for prev, cur in zip(steps, steps[1:], strict=False):
        changed = sum(a["content_hash"] != b["content_hash"] for a, b in zip(prev["candidates"], cur["candidates"], strict=True))
        assert 0.05 * len(cur["candidates"]) < changed < 0.15 * len(cur["candidates"])
        assert all(a == b for a, b in zip(prev["candidates"], cur["candidates"], strict=True) if a.get("call_id") or a["producer"] != "bench-workload/v1")
