"""What the agent read, through the agent SDK (DESIGN "What the agent read"; docs/sdk.md).

Declarations say what each tool's calls read and write (`sdk.reads`, `sdk.writes`, `sdk.about`,
`sdk.text_editor`, `sdk.shell`, `sdk.swe_agent`); the engine decides what is current (ctxeng.engine.
versions). Every oracle here is written by hand from the rule for a scripted history of OpenAI chat
dicts, or, for the shared real traces (`../shared/traces` beside the repository, or $CTXENG_TRACES), from reading
the history itself: which file was read, and which later call wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.infra import TRACES
from ctxeng import sdk

# --- scripted histories --------------------------------------------------------------------------

def call(call_id: str, name: str, **args) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def turn(*calls: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def result(call_id: str, text, **extra) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text, **extra}


def history(*messages: dict, task: str = "Fix the bug.") -> list[dict]:
    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": task}, *messages]


def tool(name: str, **properties: str) -> dict:
    """An OpenAI function tool whose arguments are `properties` (name -> JSON type)."""
    props = {}
    for arg, kind in properties.items():
        props[arg] = {"type": "array", "items": {"type": "integer"}} if kind == "array" else {"type": kind}
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool",
                                             "parameters": {"type": "object", "properties": props}}}


def numbered(start: int, *lines: str) -> str:
    """Line-numbered text as `cat -n` prints it."""
    return "".join(f"{n:6d}\t{text}\n" for n, text in enumerate(lines, start))


def pair(step, caller_id: str, tool_name: str | None = None) -> dict:
    """The manifest's tool pair of the call the caller named `caller_id` (its only use, or the one of `tool_name`)."""
    pairs = [p for p in step.manifest["tool_pairs"] if p.get("caller_call_id", p["call_id"]) == caller_id
             and (tool_name is None or p["tool_name"] == tool_name)]
    assert len(pairs) == 1, (caller_id, tool_name, pairs)
    return pairs[0]


def by_call(step, caller_id: str, tool_name: str | None = None) -> dict:
    """The manifest record (included or excluded) of that call's result."""
    result_id = pair(step, caller_id, tool_name)["result_item_id"]
    records = step.manifest["included"] + step.manifest["excluded"]
    return next(r for r in records if r["item_id"] == result_id)


def is_included(step, record: dict) -> bool:
    return record["item_id"] in {r["item_id"] for r in step.manifest["included"]}


def payload_text(step) -> str:
    return json.dumps(step.kwargs["messages"], ensure_ascii=False)


def check_every_call_paired(messages: list[dict]) -> list[str]:
    """Call ids are unique and every call has exactly one answer (and every answer a call)."""
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answers = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert len(set(calls)) == len(calls), [c for c in calls if calls.count(c) > 1]
    assert sorted(calls) == sorted(answers)
    return calls


READ_FILE = tool("read_file", path="string")
EDIT_FILE = tool("edit_file", path="string", old="string", new="string")


# --- identity, parts, versions -------------------------------------------------------------------

@pytest.mark.parametrize("repo_argument", ["repo", "repository"])
def test_two_repositories_readme_files_are_both_kept(repo_argument):
    messages = history(
        turn(call("r1", "read_file", **{repo_argument: "pi", "path": "README.md"})), result("r1", "# pi\nThe agent runtime.\n"),
        turn(call("r2", "read_file", **{repo_argument: "web", "path": "README.md"})), result("r2", "# web\nThe dashboard.\n"),
    )
    schema = tool("read_file", **{repo_argument: "string", "path": "string"})
    step = sdk.Session("coding-agent", tools={"read_file": sdk.reads("path")}).step(messages, tools=[schema])
    first, second = by_call(step, "r1"), by_call(step, "r2")
    assert is_included(step, first) and is_included(step, second)
    # Each names its object by all its identity: the repository and the path.
    assert (first["source_ref"]["repo"], first["source_ref"]["path"]) == ("pi", "README.md")
    assert (second["source_ref"]["repo"], second["source_ref"]["path"]) == ("web", "README.md")


def excerpt_tools() -> dict:
    return {"read_file": sdk.reads("path", lines=("start_line", "end_line"), revision="commit"), "edit_file": sdk.writes("path")}


EXCERPT_SCHEMAS = [tool("read_file", path="string", commit="string", start_line="integer", end_line="integer"), EDIT_FILE]
TWO_EXCERPTS = history(
    turn(call("top", "read_file", path="src/a.py", commit="abc1234", start_line=1, end_line=2)),
    result("top", "import os\nimport sys\n"),
    turn(call("mid", "read_file", path="src/a.py", commit="abc1234", start_line=40, end_line=41)),
    result("mid", "def f():\n    return 1\n"),
)


def test_two_excerpts_of_one_file_at_one_commit_are_both_kept():
    step = sdk.Session("coding-agent", tools=excerpt_tools()).step(TWO_EXCERPTS, tools=EXCERPT_SCHEMAS)
    top, mid = by_call(step, "top"), by_call(step, "mid")
    assert is_included(step, top) and is_included(step, mid)
    assert (top["source_ref"]["path"], top["source_ref"]["lines"]) == ("src/a.py", "1-2")
    assert (mid["source_ref"]["path"], mid["source_ref"]["lines"]) == ("src/a.py", "40-41")
    for record in (top, mid):
        ref = record["source_ref"]
        assert ref.get("revision", ref.get("commit")) == "abc1234"


def test_two_excerpts_of_one_file_at_one_commit_are_both_stale_after_a_write_to_that_file():
    messages = TWO_EXCERPTS + [
        turn(call("e1", "edit_file", path="src/a.py", old="return 1", new="return 2")), result("e1", "edited src/a.py"),
    ]
    step = sdk.Session("coding-agent", tools=excerpt_tools()).step(messages, tools=EXCERPT_SCHEMAS)
    edit = by_call(step, "e1")
    for caller_id in ("top", "mid"):
        record = by_call(step, caller_id)
        assert record["reason"] == "stale_revision", record
        assert edit["item_id"] in record["detail"] and "'e1'" in record["detail"]
    # The write is never stale, and it says it wrote.
    assert is_included(step, edit) and edit["source_ref"]["access"] == "write"
    assert "import sys" not in payload_text(step)


def test_a_covering_re_read_is_a_duplicate_not_stale():
    tools = {"read_file": sdk.reads("path", lines="lines")}
    messages = history(
        turn(call("narrow", "read_file", path="src/a.py", lines="10-11")), result("narrow", numbered(10, "q = 1", "r = 2")),
        turn(call("wide", "read_file", path="src/a.py", lines="9-12")), result("wide", numbered(9, "p = 0", "q = 1", "r = 2", "s = 3")),
    )
    step = sdk.Session("coding-agent", tools=tools).step(messages, tools=[tool("read_file", path="string", lines="string")])
    narrow, wide = by_call(step, "narrow"), by_call(step, "wide")
    assert narrow["reason"] == "duplicate"
    assert narrow["hard_gate"] is None
    assert wide["item_id"] in narrow["detail"]
    assert is_included(step, wide)
    # The duplicate's call is still answered: no orphaned call.
    check_every_call_paired(step.kwargs["messages"])


def test_parallel_reads_of_one_assistant_turn_never_supersede_each_other():
    messages = history(
        turn(call("p1", "read_file", path="config.py"), call("p2", "read_file", path="config.py")),
        result("p1", "DEBUG = True\n"), result("p2", "DEBUG = False\n"),
    )
    step = sdk.Session("coding-agent", tools={"read_file": sdk.reads("path")}).step(messages, tools=[READ_FILE])
    assert is_included(step, by_call(step, "p1")) and is_included(step, by_call(step, "p2"))


def test_a_write_in_the_same_turn_as_a_read_leaves_the_read():
    messages = history(
        turn(call("r1", "read_file", path="config.py"), call("e1", "edit_file", path="config.py", old="True", new="False")),
        result("r1", "DEBUG = True\n"), result("e1", "edited config.py"),
    )
    tools = {"read_file": sdk.reads("path"), "edit_file": sdk.writes("path")}
    step = sdk.Session("coding-agent", tools=tools).step(messages, tools=[READ_FILE, EDIT_FILE])
    assert is_included(step, by_call(step, "r1")) and is_included(step, by_call(step, "e1"))


@pytest.mark.parametrize("lines_declared, arguments, lines", [
    ("range", {"range": "10-11"}, "10-11"),
    ("range", {"range": [10, 11]}, "10-11"),
    ("range", {"range": [10, -1]}, "10-"),
    ("range", {"range": 5}, "5"),
    (("start", "end"), {"start": 10, "end": 11}, "10-11"),
    (lambda c: f"{c.arguments['start']}-{c.arguments['end']}", {"start": 10, "end": 11}, "10-11"),
    (lambda c: (c.arguments["start"], c.arguments["end"]), {"start": 10, "end": 11}, "10-11"),
])
def test_each_spelling_of_the_lines_read_names_the_same_range(lines_declared, arguments, lines):
    messages = history(turn(call("r1", "read_file", path="src/a.py", **arguments)), result("r1", "some text\n"))
    schema = tool("read_file", path="string", **{k: "string" for k in arguments})
    tools = {"read_file": sdk.reads("path", lines=lines_declared)}
    step = sdk.Session("coding-agent", tools=tools).step(messages, tools=[schema])
    assert by_call(step, "r1")["source_ref"]["lines"] == lines


def test_a_function_names_the_object_from_the_calls_arguments():
    def identity(c) -> dict:
        return {"repo": c.arguments["project"], "path": c.arguments["file"]}

    messages = history(
        turn(call("a", "fetch_source", project="pi", file="src/x.py")), result("a", "X = 1\n"),
        turn(call("b", "fetch_source", project="web", file="src/x.py")), result("b", "X = 2\n"),
    )
    schema = tool("fetch_source", project="string", file="string")
    step = sdk.Session("coding-agent", tools={"fetch_source": sdk.reads(identity)}).step(messages, tools=[schema])
    a, b = by_call(step, "a"), by_call(step, "b")
    assert is_included(step, a) and is_included(step, b)
    assert (a["source_ref"]["repo"], a["source_ref"]["path"]) == ("pi", "src/x.py")


def test_the_call_state_is_shared_by_the_sessions_tools_in_history_order():
    def opened(c) -> str:
        c.state["open"] = c.arguments["path"]
        return c.arguments["path"]

    tools = {"open_file": sdk.reads(opened), "edit_open_file": sdk.writes(lambda c: c.state.get("open"))}
    schemas = [tool("open_file", path="string"), tool("edit_open_file", text="string")]
    messages = history(
        turn(call("o1", "open_file", path="a.py")), result("o1", "A = 1\n"),
        turn(call("o2", "open_file", path="b.py")), result("o2", "B = 1\n"),
        turn(call("e1", "edit_open_file", text="B = 2")), result("e1", "edited"),
    )
    step = sdk.Session("coding-agent", tools=tools).step(messages, tools=schemas)
    assert is_included(step, by_call(step, "o1"))       # a.py was not the open file when the edit came
    assert by_call(step, "o2")["reason"] == "stale_revision"


# --- the text editor, SWE-agent, the shell -------------------------------------------------------

EDITOR = tool("str_replace_based_edit_tool", command="string", path="string", view_range="array",
              old_str="string", new_str="string", file_text="string", insert_line="integer")


OLD_VIEW = "Here's the result of running `cat -n` on /repo/app.py:\n" + numbered(1, "DEBUG = True", "PORT = 8000")
NEW_VIEW = "Here's the result of running `cat -n` on /repo/app.py:\n" + numbered(1, "DEBUG = False", "PORT = 8000")


def test_the_text_editor_view_str_replace_view_keeps_only_the_last_view():
    messages = history(
        turn(call("v1", "str_replace_based_edit_tool", command="view", path="/repo/app.py")),
        result("v1", OLD_VIEW),
        turn(call("s1", "str_replace_based_edit_tool", command="str_replace", path="/repo/app.py",
                  old_str="DEBUG = True", new_str="DEBUG = False")),
        result("s1", "The file /repo/app.py has been edited."),
        turn(call("v2", "str_replace_based_edit_tool", command="view", path="/repo/app.py")),
        result("v2", NEW_VIEW),
    )
    session = sdk.Session("coding-agent", tools={"str_replace_based_edit_tool": sdk.text_editor()})
    step = session.step(messages, tools=[EDITOR])
    first, edit, last = by_call(step, "v1"), by_call(step, "s1"), by_call(step, "v2")
    assert first["reason"] == "stale_revision"
    assert edit["item_id"] in first["detail"] and "'s1'" in first["detail"]
    assert is_included(step, edit) and is_included(step, last)
    assert edit["source_ref"]["access"] == "write"
    # The stale view's text is not delivered (its call is answered by a short result).
    assert json.dumps(OLD_VIEW)[1:-1] not in payload_text(step) and json.dumps(NEW_VIEW)[1:-1] in payload_text(step)
    check_every_call_paired(step.kwargs["messages"])


def test_the_text_editor_view_range_to_the_end_is_an_open_range():
    messages = history(
        turn(call("v1", "str_replace_based_edit_tool", command="view", path="/repo/app.py", view_range=[10, -1])),
        result("v1", numbered(10, "x = 1", "y = 2")),
    )
    step = sdk.Session("coding-agent", tools={"str_replace_based_edit_tool": sdk.text_editor()}).step(messages, tools=[EDITOR])
    assert by_call(step, "v1")["source_ref"]["lines"] == "10-"


SWE_TOOLS = [
    tool("bash", command="string"),
    tool("open", path="string", line_number="integer"),
    tool("create", filename="string"),
    tool("insert", text="string"),
    tool("edit", search="string", replace="string"),
    tool("find_file", file_name="string", dir="string"),
    tool("submit"),
]


def swe_window(path: str, first: int, lines: list[str], total: int) -> str:
    body = "".join(f"{n}:{text}\r\n" for n, text in enumerate(lines, first))
    return f"[File: {path} ({total} lines total)]\r\n({first - 1} more lines above)\r\n{body}(Open file: /testbed/{path})\n"


def test_swe_agent_open_then_edit_of_the_open_file_makes_the_earlier_window_stale():
    window = ["    def _serialize(self, value, attr, obj, **kwargs):",
              "        return int(value.total_seconds() / base_unit.total_seconds())"]
    messages = history(
        turn(call("o1", "open", path="src/marshmallow/fields.py", line_number=1474)),
        result("o1", swe_window("src/marshmallow/fields.py", 1473, window, 1997)),
        turn(call("e1", "edit", search="return int(value", replace="return int(round(value")),   # no path: the open file
        result("e1", "Text replaced. Please review the changes and make sure they are correct"),
    )
    step = sdk.Session("coding-agent", tools=sdk.swe_agent()).step(messages, tools=SWE_TOOLS)
    opened, edit = by_call(step, "o1"), by_call(step, "e1")
    assert opened["reason"] == "stale_revision"
    assert edit["item_id"] in opened["detail"]
    assert edit["source_ref"]["access"] == "write" and edit["source_ref"]["path"].endswith("src/marshmallow/fields.py")


BASH = tool("bash", command="string")
NO_OUTPUT = "<returncode>0</returncode>\n<output>\n</output>"


def shell_step(*messages: dict, cwd: str | None = None):
    return sdk.Session("coding-agent", tools={"bash": sdk.shell("command", cwd=cwd)}).step(history(*messages), tools=[BASH])


def test_shell_sed_in_place_makes_the_earlier_cat_of_that_file_stale_and_leaves_another_file():
    step = shell_step(
        turn(call("c1", "bash", command="cat src/f.py")), result("c1", "a = 1\n"),
        turn(call("c2", "bash", command="cat src/g.py")), result("c2", "g = 1\n"),
        turn(call("w1", "bash", command="sed -i 's/a/b/' src/f.py")), result("w1", NO_OUTPUT),
    )
    f, g, write = by_call(step, "c1"), by_call(step, "c2"), by_call(step, "w1")
    assert f["reason"] == "stale_revision" and write["item_id"] in f["detail"]
    assert is_included(step, g) and is_included(step, write)


@pytest.mark.parametrize("command", [
    "sed -i 's/a/b/' src/f.py",
    "echo 'a = 2' > src/f.py",
    "cat > src/f.py <<'EOF'\na = 2\nEOF",
    "cp src/g.py src/f.py",
    "mv src/g.py src/f.py",
    "python - <<'EOF'\nopen('src/f.py', 'w').write('a = 2\\n')\nEOF",
])
def test_each_recognised_shell_write_makes_the_earlier_cat_stale(command):
    step = shell_step(
        turn(call("c1", "bash", command="cat src/f.py")), result("c1", "a = 1\n"),
        turn(call("w1", "bash", command=command)), result("w1", NO_OUTPUT),
    )
    assert by_call(step, "c1")["reason"] == "stale_revision"


@pytest.mark.parametrize("command", ["cat src/f.py", "sed -n '1,2p' src/f.py", "head src/f.py", "grep -n a src/f.py"])
def test_each_recognised_shell_read_is_stale_after_sed_in_place(command):
    step = shell_step(
        turn(call("r1", "bash", command=command)), result("r1", "a = 1\n"),
        turn(call("w1", "bash", command="sed -i 's/a/b/' src/f.py")), result("w1", NO_OUTPUT),
    )
    assert by_call(step, "r1")["reason"] == "stale_revision"


def test_shell_recursive_grep_over_a_directory_claims_nothing_and_stays_after_writes():
    step = shell_step(
        turn(call("g1", "bash", command="grep -rn Backoff src/")), result("g1", "src/f.py:3:Backoff = 2\nsrc/g.py:9:Backoff = 2\n"),
        turn(call("w1", "bash", command="sed -i 's/Backoff = 2/Backoff = 5/' src/f.py")), result("w1", NO_OUTPUT),
        turn(call("w2", "bash", command="echo 'Backoff = 5' > src/g.py")), result("w2", NO_OUTPUT),
    )
    grep = by_call(step, "g1")
    assert is_included(step, grep)
    assert "path" not in grep["source_ref"] and not grep["source_ref"].get("objects")


def test_a_shell_command_that_is_not_recognised_claims_nothing():
    step = shell_step(
        turn(call("r1", "bash", command="cat src/f.py")), result("r1", "a = 1\n"),
        turn(call("x1", "bash", command="python run_migrations.py --all")), result("x1", "done\n"),
    )
    assert is_included(step, by_call(step, "r1"))


# --- whose data a result is ---------------------------------------------------------------------

PRINCIPAL = {"id": "support-agent", "tenant": "acme", "project": "customer-4411"}


@pytest.mark.parametrize("subject, shape", [
    ("customer_id", lambda customer: {"customer_id": customer}),
    ("order.customer_id", lambda customer: {"order": {"customer_id": customer}}),
    (lambda text: json.loads(text)["who"]["id"], lambda customer: {"who": {"id": customer}}),
])
def test_an_order_found_by_tracking_number_for_another_customer_is_refused_and_the_principals_own_kept(subject, shape):
    mine = {"order_id": "77", "status": "shipped", **shape("customer-4411")}
    theirs = {"order_id": "12", "address": "1 Other St", **shape("customer-9999")}
    messages = [
        {"role": "system", "content": "You are a support agent for this customer only."},
        {"role": "user", "content": "Where are my parcels 1Z111 and 1Z999?"},
        turn(call("t1", "get_order_by_tracking", tracking="1Z111"), call("t2", "get_order_by_tracking", tracking="1Z999")),
        result("t1", json.dumps(mine)), result("t2", json.dumps(theirs)),
    ]
    session = sdk.Session("chat-agent", principal=PRINCIPAL, tools={"get_order_by_tracking": sdk.about(result=subject)})
    step = session.step(messages, tools=[tool("get_order_by_tracking", tracking="string")])
    own, other = by_call(step, "t1"), by_call(step, "t2")
    assert is_included(step, own)
    assert other["reason"] == "permission_denied"
    assert "customer-9999" in other["detail"]
    assert "1 Other St" not in payload_text(step) and "shipped" in payload_text(step)
    check_every_call_paired(step.kwargs["messages"])


# --- declarations checked against the step's tools -----------------------------------------------

READ_ONCE = history(turn(call("r1", "read_file", path="a.py")), result("r1", "A = 1\n"))


def test_a_declaration_naming_an_argument_the_tool_lacks_is_refused_naming_both():
    with pytest.raises(sdk.SDKError) as exc:
        sdk.Session("coding-agent", tools={"read_file": sdk.reads("filename")}).step(READ_ONCE, tools=[READ_FILE])
    assert "filename" in str(exc.value) and "read_file" in str(exc.value)


def test_a_misspelled_declared_tool_name_is_refused_naming_it():
    with pytest.raises(sdk.SDKError) as exc:
        sdk.Session("coding-agent", tools={"raed_file": sdk.reads("path")}).step(READ_ONCE, tools=[READ_FILE])
    assert "raed_file" in str(exc.value)


def test_check_tools_warn_only_warns_for_a_misspelled_tool_name():
    session = sdk.Session("coding-agent", tools={"raed_file": sdk.reads("path")}, check_tools="warn")
    with pytest.warns(Warning, match="raed_file"):
        step = session.step(READ_ONCE, tools=[READ_FILE])
    assert step.status == "ready"


# --- quirks of real histories --------------------------------------------------------------------

def test_a_tool_message_whose_content_is_a_list_of_text_parts_is_read_as_its_text():
    as_string = history(turn(call("r1", "read_file", path="a.py")), result("r1", "A = 1\n"))
    as_parts = history(turn(call("r1", "read_file", path="a.py")), result("r1", [{"type": "text", "text": "A = 1\n"}]))
    tools = {"read_file": sdk.reads("path")}
    string_step = sdk.Session("coding-agent", tools=tools).step(as_string, tools=[READ_FILE])
    parts_step = sdk.Session("coding-agent", tools=tools).step(as_parts, tools=[READ_FILE])
    assert parts_step.status == "ready"
    assert parts_step.kwargs["messages"] == string_step.kwargs["messages"]
    two_parts = history(turn(call("r1", "read_file", path="a.py")),
                        result("r1", [{"type": "text", "text": "A = 1\n"}, {"type": "text", "text": "B = 2\n"}]))
    step = sdk.Session("coding-agent", tools=tools).step(two_parts, tools=[READ_FILE])
    answer = next(m for m in step.kwargs["messages"] if m["role"] == "tool")
    text = answer["content"] if isinstance(answer["content"], str) else json.dumps(answer["content"])
    assert "A = 1" in text and "B = 2" in text


def trace(*parts: str) -> Path:
    path = TRACES.joinpath(*parts)
    assert path.exists(), f"the shared traces are missing: {path} (the `shared/` folder beside the repository, or $CTXENG_TRACES)"
    return path


def swe_agent_history() -> list[dict]:
    paths = sorted(trace("swe-agent").glob("*.traj"))
    assert len(paths) == 1, f"expected the one SWE-agent .traj file in {TRACES / 'swe-agent'}, found {paths}"
    return json.loads(paths[0].read_text())["history"]


def caller_ids(messages: list[dict]) -> tuple[list[str], list[str]]:
    """(the call ids of every assistant turn, the ids every tool message answers), in order."""
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answers = [m["tool_call_id"] if "tool_call_id" in m else m["tool_call_ids"][0] for m in messages if m["role"] == "tool"]
    return calls, answers


@pytest.fixture(scope="module")
def swe_step():
    messages = swe_agent_history()
    step = sdk.Session("coding-agent", tools=sdk.swe_agent()).step(messages, tools=SWE_TOOLS)
    return messages, step


def test_the_shared_swe_agent_history_assembles_with_unique_paired_call_ids(swe_step):
    messages, step = swe_step
    assert step.status == "ready"
    calls = check_every_call_paired(step.kwargs["messages"])
    assert len(calls) == len(caller_ids(messages)[0])


def test_the_swe_agent_step_gives_back_the_callers_own_call_ids(swe_step):
    messages, step = swe_step
    assert caller_ids(step.messages) == caller_ids(messages)


def test_a_reused_call_ids_rewrite_is_recorded_in_the_tool_pairs(swe_step):
    messages, step = swe_step
    calls = caller_ids(messages)[0]
    reused = {c for c in calls if calls.count(c) > 1}
    assert reused, "the shared SWE-agent history reuses a call id in different turns"
    for caller_id in reused:
        pairs = [p for p in step.manifest["tool_pairs"] if p.get("caller_call_id", p["call_id"]) == caller_id]
        assert len(pairs) == calls.count(caller_id)
        assert len({p["serialized_call_id"] for p in pairs}) == len(pairs)
        assert any(p.get("caller_call_id") == caller_id and p["serialized_call_id"] != caller_id for p in pairs)


def test_in_the_swe_agent_history_the_edit_makes_the_open_window_of_fields_py_stale(swe_step):
    messages, step = swe_step
    # Read from the history: `open src/marshmallow/fields.py 1474`, then `edit` (of the open file).
    open_id = next(c["id"] for m in messages for c in m.get("tool_calls") or []
                   if c["function"]["name"] == "open" and "fields.py" in c["function"]["arguments"])
    edit_id = next(c["id"] for m in messages for c in m.get("tool_calls") or [] if c["function"]["name"] == "edit")
    window, edit = by_call(step, open_id, "open"), by_call(step, edit_id, "edit")
    assert window["reason"] == "stale_revision"
    assert edit["item_id"] in window["detail"]
    assert is_included(step, edit)


MINI_RUNS = ["astropy__astropy-14995", "django__django-11815", "django__django-13964", "sqlfluff__sqlfluff-2419"]


def mini_swe_agent_history(name: str) -> list[dict]:
    messages = json.loads(trace("mini-swe-agent", f"{name}.json").read_text())["messages"]
    assert messages[-1]["role"] == "exit"
    return messages[:-1]


def mini_step(messages: list[dict]):
    session = sdk.Session("coding-agent", tools={"bash": sdk.shell("command", cwd="/testbed")})
    return session.step(messages, tools=[BASH])


@pytest.mark.parametrize("name", MINI_RUNS)
def test_each_mini_swe_agent_run_assembles_with_every_call_paired(name):
    messages = mini_swe_agent_history(name)
    step = mini_step(messages)
    assert step.status == "ready"
    check_every_call_paired(step.kwargs["messages"])
    assert caller_ids(step.messages)[0] == caller_ids(messages)[0]


def test_in_the_sqlfluff_run_the_heredoc_rewrite_makes_the_earlier_cats_of_l060_stale():
    messages = mini_swe_agent_history("sqlfluff__sqlfluff-2419")

    def call_of(command: str) -> str:
        return next(c["id"] for m in messages for c in m.get("tool_calls") or []
                    if json.loads(c["function"]["arguments"])["command"] == command)

    # Read from the history: L060.py is read whole twice, then rewritten by a heredoc; L055.py is
    # read and never written; `head -30` reads L060.py after the rewrite.
    first_cat = call_of("cat src/sqlfluff/rules/L060.py")
    second_cat = call_of("cd /testbed && cat src/sqlfluff/rules/L060.py")
    rewrite = next(c["id"] for m in messages for c in m.get("tool_calls") or []
                   if json.loads(c["function"]["arguments"])["command"].startswith("cd /testbed && cat > src/sqlfluff/rules/L060.py"))
    other = call_of("cat src/sqlfluff/rules/L055.py")
    after = call_of("cd /testbed && head -30 src/sqlfluff/rules/L060.py")
    step = mini_step(messages)
    write = by_call(step, rewrite)
    assert write["source_ref"].get("access") == "write" or any(
        o.get("access") == "write" for o in write["source_ref"].get("objects", []))
    # The two whole reads have equal text: the first is covered by the second (a duplicate) or,
    # like the second, stale by the rewrite; either way it is gone. The second is stale.
    assert by_call(step, first_cat)["reason"] in ("duplicate", "stale_revision")
    second = by_call(step, second_cat)
    assert second["reason"] == "stale_revision" and write["item_id"] in second["detail"]
    assert is_included(step, by_call(step, other)) and is_included(step, by_call(step, after))


def test_the_text_editors_create_replaces_and_its_edits_do_not():
    editor = tool("str_replace_based_edit_tool", command="string", path="string", file_text="string",
                  old_str="string", new_str="string", view_range="array")
    body1, body2 = "A = 1\n" * 60, "B = 2\n" * 60
    h = history(
        turn(call("c1", "str_replace_based_edit_tool", command="create", path="/r/p.py", file_text=body1)), result("c1", "created"),
        turn(call("s1", "str_replace_based_edit_tool", command="str_replace", path="/r/p.py", old_str="A = 1\n" * 40,
                  new_str="C = 3\n" * 40)), result("s1", "edited"),
        turn(call("c2", "str_replace_based_edit_tool", command="create", path="/r/p.py", file_text=body2)), result("c2", "created"),
    )
    step = sdk.Session("coding-agent", tools={"str_replace_based_edit_tool": sdk.text_editor()}).step(h, tools=[editor])
    refs = {c: by_call(step, c)["source_ref"] for c in ("c1", "s1", "c2")}
    assert refs["c1"].get("replaces") is True and refs["c2"].get("replaces") is True and "replaces" not in refs["s1"]
    # The second create replaces the file whole: the first create's body and the edit's strings are
    # obsolete and elided (coding-agent allows elide_superseded); the last create is sent whole.
    sent = {c["id"]: json.loads(c["function"]["arguments"]) for m in step.kwargs["messages"] for c in m.get("tool_calls") or []}
    assert sent["c2"]["file_text"] == body2
    assert sent["c1"]["file_text"].startswith("[elided by ctxeng: superseded by the write in call c2]")
    assert sent["s1"]["old_str"].startswith("[elided by ctxeng")
