"""`Session(keep_steps=)`: the latest steps keep their payload and manifests; an older step still
answers what identifies it, and reading its contents says why it cannot."""

from __future__ import annotations

import copy

import pytest

from ctxeng import sdk
from ctxeng.sdk._session import KEEP_STEPS

from .test_incremental_step import READ_FILE, _tracked_objects, coding_history


def _run(keep_steps, steps: int):
    session = sdk.Session("coding-agent", model="gpt-4o", keep_steps=keep_steps)
    history = coding_history(steps + 2)
    seen = []
    for n in range(steps):
        step = session.step(history[:4 + 2 * n], tools=[READ_FILE])
        step.report_usage({"usage": {"prompt_tokens": 300 + n, "completion_tokens": 20}})
        seen.append({"id": step.assembly_id, "status": step.status, "reason": step.blocked_reason,
                     "usage": dict(step.usage), "manifest": copy.deepcopy(step.manifest),
                     "payload": copy.deepcopy(step.payload), "repr": repr(step)})
    return session, seen


def test_the_latest_steps_keep_their_contents_and_older_ones_what_identifies_them():
    session, seen = _run(3, 7)
    assert len(session.steps) == 7
    for step, before in zip(session.steps[:4], seen[:4], strict=True):  # let go of
        assert (step.assembly_id, step.status, step.ready, step.blocked_reason, step.usage, repr(step)) == (
            before["id"], before["status"], True, before["reason"], before["usage"], before["repr"])
        assert step._retired is None and _tracked_objects(step) < 10
        for read in ("payload", "manifest", "sealed_manifest", "kwargs", "messages", "system"):
            with pytest.raises(sdk.SDKError, match=r"^step step-\d: its payload and manifest were let go: the session keeps those of its last 3 steps \(Session\(keep_steps="):
                getattr(step, read)
    for step, before in zip(session.steps[4:], seen[4:], strict=True):  # kept, read as they were
        assert step.manifest == before["manifest"] and step.payload == before["payload"]
        assert step.usage == before["usage"]


def test_none_keeps_every_steps_contents():
    session, seen = _run(None, 5)
    for step, before in zip(session.steps, seen, strict=True):
        assert step.manifest == before["manifest"] and step.payload == before["payload"]


def test_the_default_keeps_a_bounded_number_of_steps():
    assert sdk.Session("coding-agent").keep_steps == KEEP_STEPS == 20
    session, seen = _run(KEEP_STEPS, KEEP_STEPS + 2)
    dropped = [s for s in session.steps if s._kept is not None]
    assert dropped == session.steps[:2]
    assert session.steps[2].manifest == seen[2]["manifest"]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "3"])
def test_keep_steps_refuses_what_is_not_a_whole_number_of_at_least_one(bad):
    with pytest.raises(sdk.SDKError, match=r"^keep_steps: expected a whole number of at least 1, or None"):
        sdk.Session("coding-agent", keep_steps=bad)
