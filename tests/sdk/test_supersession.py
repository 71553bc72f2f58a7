"""Object identity and supersession (issue 38 point 1): only the newest reading of an object
reaches the model; an older one is `stale_revision`, naming the item that supersedes it.

Through `sdk.file` revisions, through declared tools (`Session(tools={"read_file":
sdk.reads("path"), "edit_file": sdk.writes("path")})`), and a subject declared with `sdk.about`
whose other subjects' data the scope gate refuses. Undeclared tools behave as before.
"""

from __future__ import annotations

import json

import pytest

from ctxeng import sdk

OLD = "DEBUG = True\nPORT = 8000\n"
NEW = "DEBUG = False\nPORT = 8080\n"


def call(call_id: str, name: str, **args) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def turn(*calls) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def result(call_id: str, text: str, **extra) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text, **extra}


CODING = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Turn DEBUG off in config.py."},
    turn(call("r1", "read_file", path="config.py")),
    result("r1", OLD),
    turn(call("e1", "edit_file", path="config.py", old="DEBUG = True", new="DEBUG = False")),
    result("e1", "edited config.py"),
    turn(call("r2", "read_file", path="config.py")),
    result("r2", NEW),
]
DECLARED = {"read_file": sdk.reads("path"), "edit_file": sdk.writes("path")}


def by_call(step, call_id: str) -> dict:
    pair = next(p for p in step.manifest["tool_pairs"] if p["call_id"] == call_id)
    records = step.manifest["included"] + step.manifest["excluded"]
    return next(r for r in records if r["item_id"] == pair["result_item_id"])


def payload_text(step) -> str:
    return json.dumps(step.kwargs["messages"])


def test_through_sdk_file_revisions_only_the_newest_reaches_the_model():
    session = sdk.Session("coding-agent")
    history = CODING[:2]
    old, new = sdk.file("config.py", OLD, revision=1), sdk.file("config.py", NEW, revision=2)
    step = session.step(history, items=[old, new])
    stale = next(r for r in step.manifest["excluded"] if r["item_id"] == old.item_id)
    assert stale["reason"] == "stale_revision" and new.item_id in stale["detail"]
    assert new.item_id in [r["item_id"] for r in step.manifest["included"]]
    assert "PORT = 8000" not in payload_text(step) and "PORT = 8080" in payload_text(step)
    # The order the items are given in does not matter: the revision says which is newer.
    step = sdk.Session("coding-agent").step(history, items=[new, old])
    assert next(r for r in step.manifest["excluded"] if r["item_id"] == old.item_id)["reason"] == "stale_revision"


def test_through_declared_tools_a_read_edited_and_read_again_keeps_only_the_newest_read():
    step = sdk.Session("coding-agent", tools=DECLARED).step(CODING)
    first, edit, second = by_call(step, "r1"), by_call(step, "e1"), by_call(step, "r2")
    assert first["reason"] == "stale_revision"
    # The event that made it stale is named: the write's item and call (the first change after it).
    assert edit["item_id"] in first["detail"] and "'e1'" in first["detail"] and "path 'config.py'" in first["detail"]
    assert second in step.manifest["included"] and edit in step.manifest["included"]
    # The stale read's call still has an answer (a pair is never broken), without the old text.
    assert "PORT = 8000" not in payload_text(step) and "PORT = 8080" in payload_text(step)
    # The revision is the history's order, not a number the SDK states: only a stated revision is one.
    assert second["source_ref"]["path"] == "config.py" and "revision" not in second["source_ref"]


def test_a_write_makes_an_earlier_read_stale_before_the_file_is_read_again():
    step = sdk.Session("coding-agent", tools=DECLARED).step(CODING[:6])
    first, edit = by_call(step, "r1"), by_call(step, "e1")
    assert first["reason"] == "stale_revision" and edit["item_id"] in first["detail"]
    assert "PORT = 8000" not in payload_text(step)


def test_a_failed_write_changes_nothing():
    history = CODING[:5] + [result("e1", "error: no such line", status="error")]
    step = sdk.Session("coding-agent", tools=DECLARED).step(history)
    assert by_call(step, "r1") in step.manifest["included"]


def test_reads_of_two_files_do_not_supersede_each_other():
    history = CODING[:2] + [turn(call("a", "read_file", path="a.py"), call("b", "read_file", path="b.py")),
                            result("a", "A = 1"), result("b", "B = 2")]
    step = sdk.Session("coding-agent", tools=DECLARED).step(history)
    assert by_call(step, "a") in step.manifest["included"] and by_call(step, "b") in step.manifest["included"]


def test_undeclared_tools_keep_every_read_as_before():
    step = sdk.Session("coding-agent").step(CODING)
    assert all(by_call(step, c) in step.manifest["included"] for c in ("r1", "e1", "r2"))


def test_the_session_tracks_each_objects_newest_revision():
    session = sdk.Session("coding-agent", tools=DECLARED)
    session.step(CODING)
    assert session.revisions == {"path=config.py": 1}


SUPPORT = [
    {"role": "system", "content": "You are a support agent for this customer only."},
    {"role": "user", "content": "Where is my order?"},
    turn(call("o1", "get_orders", customer_id="customer-4411"), call("o2", "get_orders", customer_id="customer-9999")),
    result("o1", "order 77: shipped"),
    result("o2", "order 12: card 4242, address 1 Other St"),
]


def test_a_result_about_another_subject_is_refused_by_the_scope_gate():
    principal = {"id": "support-agent", "tenant": "acme", "project": "customer-4411"}
    session = sdk.Session("chat-agent", principal=principal, tools={"get_orders": sdk.about("customer_id")})
    step = session.step(SUPPORT)
    mine, other = by_call(step, "o1"), by_call(step, "o2")
    assert mine in step.manifest["included"]
    assert (other["reason"], other["hard_gate"]) == ("permission_denied", "tenant_and_project_scope")
    assert "customer-9999" in other["detail"]
    assert "1 Other St" not in payload_text(step) and "order 77" in payload_text(step)


def test_a_declared_scope_function_places_the_subject():
    principal = {"id": "support-agent", "tenant": "acme", "project": "support"}
    tools = {"get_orders": sdk.about("customer_id", scope=lambda c: f"acme/support/{c}")}
    session = sdk.Session("chat-agent", principal=principal, scope="acme/support/customer-4411", tools=tools)
    step = session.step(SUPPORT)
    assert by_call(step, "o1") in step.manifest["included"]
    assert by_call(step, "o2")["reason"] == "permission_denied"


@pytest.mark.parametrize("tools, field", [
    ({"read_file": "path"}, "tools.read_file"),
    ([("read_file", sdk.reads("path"))], "tools:"),
])
def test_bad_declarations_name_the_field(tools, field):
    with pytest.raises(sdk.SDKError) as exc:
        sdk.Session("coding-agent", tools=tools)
    assert str(exc.value).startswith(field)


def test_declarations_need_an_argument_name():
    with pytest.raises(sdk.SDKError, match=r"reads\(argument=...\)"):
        sdk.reads("")


def test_a_declared_argument_no_call_gives_is_said_once_and_claims_nothing():
    # The tool's calls name `path`; the declaration says `filename`: without tool schemas to check
    # against, the first call that lacks the argument says so, once, and nothing is made stale.
    session = sdk.Session("coding-agent", tools={"read_file": sdk.reads("filename"), "edit_file": sdk.writes("path")})
    with pytest.warns(UserWarning, match=r"tools\.read_file: a call gave no argument 'filename'.*it gave: path") as seen:
        step = session.step(CODING)
    assert len([w for w in seen if "read_file" in str(w.message)]) == 1
    assert by_call(step, "r1") in step.manifest["included"]
