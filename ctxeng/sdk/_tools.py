"""Tool declarations: which object each call reads or writes, which part, and whose data its result is.

    session = sdk.Session("coding-agent", tools={
        "read_file": sdk.reads("path", lines=("start", "end")),   # a part of the file at `path`
        "edit_file": sdk.writes("path"),                          # a successful call changes it
        "str_replace_based_edit_tool": sdk.text_editor(),         # view reads, create/str_replace/insert write
        "bash": sdk.shell("command", cwd="/testbed"),             # cat/sed -n/grep read, sed -i/>/heredocs write
    })
    session = sdk.Session("chat-agent", principal={..., "project": "customer-4411"}, tools={
        "get_orders": sdk.about("customer_id"),                    # its result is that customer's data
        "get_order_by_tracking": sdk.about(result="customer_id"),  # ... the customer the result names
    })
    session = sdk.Session("coding-agent", tools=sdk.swe_agent())   # SWE-agent's stateful tools

A declaration turns one call (its name, arguments, result text, status, and the session's `state`
while it reads the history) into *effects*: the objects the call read (with the part: `lines`, or
a `part` in words) or wrote, each named by all of its identity. The engine decides what is stale
from them (ctxeng.engine.versions): a reading is stale once the object changed after it; parts of
one version never are. What a declaration cannot name it does not claim: a call whose object
argument is missing, a shell command it does not recognise, claims nothing, so nothing is dropped
on a guess.

Identity: the arguments a declaration names, plus the repository a call names (`repo`,
`repository`), so `read_file({"repo": "payments-api", "path": "README.md"})` and the same path in
`payments-sdk` are two objects. A `path`, `url`, `memory_id` or `artifact_id` argument becomes
that source_ref field (so `sdk.file(...)` and a declared read of one path are one object); other
arguments name an `object: "<argument>=<value>"`.

Declarations are checked against the step's tool schemas when the session first sees each tool
(`Session(check_tools=...)`): an argument the tool does not have, or a declared name that is not
among the step's tools, is an error naming both ("warn" makes the second a warning, for agents
that offer some tools only at some steps).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import SDKError

# Arguments that already name an object the engine recognizes by that source_ref field.
_REF_FIELDS = ("path", "url", "memory_id", "artifact_id")
# Arguments that say which repository a path is in (an object is named by all of its identity).
_REPO_ARGS = ("repo", "repository")


@dataclass
class Call:
    """One tool call as a declaration's function sees it: `name`, `arguments`, the `result` text,
    its `status`, and `state`, a dict the session keeps while it reads one history in order (shared
    by every tool of the session: SWE-agent's open file, a shell's directory)."""

    name: str
    arguments: dict[str, Any]
    result: str = ""
    status: str = "success"
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Effect:
    """One object a call read or wrote: its source_ref identity fields, the part, the stated version."""

    access: str  # "read" or "write"
    ref: tuple[tuple[str, str], ...]
    lines: str | None = None
    part: str | None = None
    revision: str | None = None
    replaces: bool = False  # a write that puts new content in place of the old (not an edit of it)

    def source_ref(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.ref)
        if self.lines is not None:
            out["lines"] = self.lines
        if self.part is not None:
            out["part"] = self.part
        if self.revision is not None:
            out["revision"] = self.revision
        if self.access == "write":
            out["access"] = "write"
            if self.replaces:
                out["replaces"] = True
        return out

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return self.ref


class Declaration:
    """What a tool's calls do. Subclasses give `effects(call)`; `arguments()` names the arguments
    the declaration reads (checked against the tool's schema)."""

    about: _About | None = None
    optional = False  # one of a toolkit's declarations (sdk.swe_agent()): an agent may offer only some of them

    def effects(self, call: Call) -> list[Effect]:
        return []

    def arguments(self) -> list[str]:
        return self.about.arguments() if self.about is not None else []

    def subject(self, call: Call) -> Any:
        return self.about.subject(call) if self.about is not None else None

    @property
    def scope(self) -> Callable[[Any], str] | None:
        return self.about.scope if self.about is not None else None

    @property
    def writes_objects(self) -> bool:
        """Can a call of this tool change an object? (Its newest readings rank as what the agent works on.)"""
        return False

    @property
    def reads_objects(self) -> bool:
        return False


# --------------------------------------------------------------------------- naming an object


def _check_name(builder: str, name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise SDKError(f"{builder}({what}=...): expected the name of the tool's argument, got {name!r}")
    return name


def _scalar(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    text = str(value)
    return text if text.strip() else None


def object_ref(names: Iterable[str], arguments: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The source_ref identity fields of the object these arguments name, or None when one is missing."""
    names = list(names)
    values = {}
    for name in names:
        value = _scalar(arguments.get(name))
        if value is None:
            return None
        values[name] = value
    repo = next((_scalar(arguments.get(a)) for a in _REPO_ARGS if a not in values and _scalar(arguments.get(a)) is not None), None)
    primary = next((n for n in names if n in _REF_FIELDS), None)
    out: list[tuple[str, str]] = []
    if primary is not None:
        out.append((primary, values.pop(primary)))
        for a in _REPO_ARGS:
            if a in values:
                repo = values.pop(a)
        if repo is not None:
            out.append(("repo", repo))
        if values:
            out.append(("within", ", ".join(f"{k}={v}" for k, v in values.items())))
    else:
        if repo is not None:
            values = {"repo": repo, **values}
        out.append(("object", ", ".join(f"{k}={v}" for k, v in values.items())))
    return tuple(out)


def _ref_of(value: Any) -> tuple[tuple[str, str], ...] | None:
    """What a declaration's own function returned, as identity fields: a path, or a dict of fields."""
    if isinstance(value, str):
        return (("path", value),) if value.strip() else None
    if isinstance(value, dict):
        fields = {k: _scalar(v) for k, v in value.items()}
        if any(v is None for v in fields.values()) or not fields:
            return None
        keys = [k for k in _REF_FIELDS if k in fields] or ["object"]
        if keys == ["object"] and "object" not in fields:
            return (("object", ", ".join(f"{k}={v}" for k, v in fields.items())),)
        out = [(keys[0], fields.pop(keys[0]))]
        for a in _REPO_ARGS:
            if a in fields:
                out.append(("repo", fields.pop(a)))
        if fields:
            out.append(("within", ", ".join(f"{k}={v}" for k, v in fields.items())))
        return tuple(out)
    return None


def lines_text(value: Any) -> str | None:
    """A range as the engine reads it ("120-160", "120-" to the end, "5"), from "a-b", [a, b] (b = -1:
    to the end), (a, b) or an int; None for anything else (no range: the whole object)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if value >= 1 else None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        a, b = value
        if isinstance(a, int) and not isinstance(a, bool) and a >= 1:
            if b is None or (isinstance(b, int) and not isinstance(b, bool) and b < 0):
                return f"{a}-"
            if isinstance(b, int) and not isinstance(b, bool) and b >= a:
                return f"{a}-{b}"
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(?:[-:]\s*\d*\s*)?(?:,\s*\d+\s*(?:[-:]\s*\d*\s*)?)*", value):
        return value.replace(" ", "").replace(":", "-")
    return None


# The numbered lines of an editor's view ("   120\tcode", "120:code"): what part of a file it shows.
_NUMBERED = re.compile(r"^\s*(\d{1,7})(?:\t|:)", re.M)


def shown_lines(text: str) -> str | None:
    """The range a numbered view shows ("1457-1556"), from its first and last numbered line."""
    numbers = [int(m.group(1)) for m in _NUMBERED.finditer(text)]
    if not numbers or numbers != sorted(numbers):
        return None
    return f"{numbers[0]}-{numbers[-1]}"


# --------------------------------------------------------------------------- the declarations


class _About:
    """Whose data a result is: a call argument, a field of the result, or a function of its text."""

    def __init__(self, argument: str | None, result: Any, scope: Callable[[Any], str] | None) -> None:
        self.argument, self.result, self.scope = argument, result, scope

    def arguments(self) -> list[str]:
        return [self.argument] if self.argument is not None else []

    def subject(self, call: Call) -> Any:
        if self.argument is not None:
            return _scalar(call.arguments.get(self.argument))
        if callable(self.result):
            return _scalar(self.result(call.result))
        return _scalar(_json_field(call.result, self.result))


def _json_field(text: str, path: str) -> Any:
    """`path` ("customer_id", "order.customer_id") in a JSON result, or None."""
    try:
        value: Any = json.loads(text)
    except (TypeError, ValueError):
        return None
    for step in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


class Access(Declaration):
    """`sdk.reads` / `sdk.writes`: one object per call, named by arguments or by a function."""

    def __init__(self, access: str, names: tuple[str, ...], find: Callable[[Call], Any] | None,
                 lines: Any, revision: Any, about: _About | None, replaces: bool = False) -> None:
        self.access, self.names, self.find, self.lines, self.revision, self.about = access, names, find, lines, revision, about
        self.replaces = replaces

    @property
    def writes_objects(self) -> bool:
        return self.access == "write"

    @property
    def reads_objects(self) -> bool:
        return self.access == "read"

    def arguments(self) -> list[str]:
        named = list(self.names)
        if isinstance(self.lines, str):
            named.append(self.lines)
        elif isinstance(self.lines, tuple):
            named.extend(self.lines)
        if isinstance(self.revision, str):
            named.append(self.revision)
        return named + super().arguments()

    def effects(self, call: Call) -> list[Effect]:
        if self.find is not None:
            ref = _ref_of(self.find(call))
        else:
            ref = object_ref(self.names, call.arguments)
        if ref is None:
            return []
        lines = None
        if self.access == "read":
            if callable(self.lines):
                lines = lines_text(self.lines(call))
            elif isinstance(self.lines, tuple):
                start, end = (call.arguments.get(a) for a in self.lines)
                lines = lines_text((start, -1 if end is None else end)) if start is not None else None
            elif isinstance(self.lines, str):
                lines = lines_text(call.arguments.get(self.lines))
        revision = self.revision(call) if callable(self.revision) else (
            call.arguments.get(self.revision) if isinstance(self.revision, str) else None)
        return [Effect(self.access, ref, lines, None, _scalar(revision), self.access == "write" and self.replaces)]


def _names(builder: str, arguments: tuple[Any, ...]) -> tuple[tuple[str, ...], Callable[[Call], Any] | None]:
    if len(arguments) == 1 and callable(arguments[0]):
        return (), arguments[0]
    if not arguments:
        raise SDKError(f"{builder}(...): name the argument(s) that name the object, or give a function of the call")
    return tuple(_check_name(builder, a, "argument") for a in arguments), None


def _check_scope(builder: str, scope: Any) -> Callable[[Any], str] | None:
    if scope is not None and not callable(scope):
        raise SDKError(f"{builder}(scope=...): expected a function of the subject returning a scope")
    return scope


def _about(builder: str, about: Any, scope: Any) -> _About | None:
    scope = _check_scope(builder, scope)
    if about is None:
        return _About(None, None, scope) if scope is not None else None
    return _About(_check_name(builder, about, "about"), None, scope)


def _lines_spec(builder: str, lines: Any) -> Any:
    if lines is None or callable(lines):
        return lines
    if isinstance(lines, str):
        return _check_name(builder, lines, "lines")
    if isinstance(lines, tuple) and len(lines) == 2:
        return tuple(_check_name(builder, a, "lines") for a in lines)
    raise SDKError(f"{builder}(lines=...): expected an argument name, (start, end) argument names, or a function of the call")


def reads(*arguments: Any, lines: Any = None, revision: Any = None, about: str | None = None,
          scope: Callable[[Any], str] | None = None) -> Declaration:
    """The tool's result shows the object its `arguments` name (or a function of the call returns:
    a path, or a dict of source_ref fields; None claims nothing). `lines`: the argument holding the
    range ("a-b", [a, b], b = -1 to the end), `(start, end)` argument names, or a function of the
    call; none means the whole object. `revision`: the argument (or function) stating the revision
    or commit read. A later write of the object, or a later reading that shows it changed, makes
    this result stale; other parts of the same version never do."""
    names, find = _names("reads", arguments)
    if revision is not None and not callable(revision):
        revision = _check_name("reads", revision, "revision")
    return Access("read", names, find, _lines_spec("reads", lines), revision, _about("reads", about, scope))


def writes(*arguments: Any, replaces: bool = False, about: str | None = None,
           scope: Callable[[Any], str] | None = None) -> Declaration:
    """A successful call changes the object its `arguments` name (or a function of the call
    returns): every earlier reading of it, any part, is stale. `replaces=True`: the call puts new
    content in place of the old (`write_file(path, content)`, a plan rewritten whole), not an edit
    of it, so an earlier write's arguments are obsolete (`transforms.allowed: elide_superseded`)."""
    names, find = _names("writes", arguments)
    if not isinstance(replaces, bool):
        raise SDKError(f"writes(replaces=...): expected True or False, got {replaces!r}")
    return Access("write", names, find, None, None, _about("writes", about, scope), replaces)


def about(argument: str | None = None, *, result: Any = None, scope: Callable[[Any], str] | None = None) -> Declaration:
    """The tool's result is data about a subject (a customer, an account): the one its `argument`
    names, or, with `result=`, the one the result names (a JSON field or dotted path:
    `"customer_id"`, `"order.customer_id"`; or a function of the result text). Its scope is
    `scope(subject)` (default `<tenant>/<subject>`), so another subject's data is refused."""
    if (argument is None) == (result is None):
        raise SDKError("about(...): name the argument, or give result= (a field of the result or a function of its text)")
    if argument is not None:
        return _with_about(_About(_check_name("about", argument, "argument"), None, _check_scope("about", scope)))
    if not callable(result):
        _check_name("about", result, "result")
    return _with_about(_About(None, result, _check_scope("about", scope)))


def _with_about(what: _About) -> Declaration:
    decl = Declaration()
    decl.about = what
    return decl


class Commands(Declaration):
    """A tool whose `command` argument says whether a call reads or writes (an editor)."""

    def __init__(self, argument: str, path: str, reading: dict[str, str | None], writing: tuple[str, ...],
                 replacing: tuple[str, ...] = ()) -> None:
        self.argument, self.path, self.reading, self.writing, self.replacing = argument, path, reading, writing, replacing

    reads_objects = True
    writes_objects = True

    def arguments(self) -> list[str]:
        return [self.argument, self.path, *sorted({r for r in self.reading.values() if r})]

    def effects(self, call: Call) -> list[Effect]:
        command = call.arguments.get(self.argument)
        ref = object_ref([self.path], call.arguments)
        if ref is None or not isinstance(command, str):
            return []
        if command in self.writing:
            return [Effect("write", ref, replaces=command in self.replacing)]
        if command in self.reading:
            spec = self.reading[command]
            lines = lines_text(call.arguments.get(spec)) if spec else None
            return [Effect("read", ref, lines)]
        return []


def commands(argument: str = "command", *, path: str = "path", reads: Any = None,
             writes: Iterable[str] = ("create", "str_replace", "insert", "undo_edit"),
             replaces: Iterable[str] = ("create",)) -> Declaration:
    """One declaration for a multi-command tool: `reads` maps each reading command to the argument
    holding its range (or None: the whole object), `writes` lists the commands that change the
    object at `path`, `replaces` those of them that put new content in place of the old (`create`).
    Other commands claim nothing."""
    reading = {"view": "view_range"} if reads is None else reads
    if isinstance(reading, (list, tuple)):
        reading = {c: None for c in reading}
    if not isinstance(reading, dict) or not all(isinstance(c, str) for c in reading):
        raise SDKError("commands(reads=...): expected {command: range argument or None} or a list of commands")
    writing = tuple(writes)
    if not all(isinstance(c, str) and c for c in writing):
        raise SDKError("commands(writes=...): expected a list of command names")
    replacing = tuple(replaces)
    return Commands(_check_name("commands", argument, "argument"), _check_name("commands", path, "path"), dict(reading), writing,
                    replacing)


def text_editor() -> Declaration:
    """Anthropic's text editor tool (`str_replace_based_edit_tool`, `str_replace_editor`) and
    SWE-agent's `str_replace_editor`: `view` reads `path` (the `view_range` part), `create`,
    `str_replace`, `insert` and `undo_edit` write it."""
    return commands("command", path="path", reads={"view": "view_range"},
                    writes=("create", "str_replace", "insert", "undo_edit"))


class Shell(Declaration):
    """A `bash` tool: the command string is read for file reads and writes (ctxeng.sdk._shell)."""

    def __init__(self, argument: str, cwd: str | None) -> None:
        self.argument, self.cwd = argument, cwd

    reads_objects = True
    writes_objects = True

    def arguments(self) -> list[str]:
        return [self.argument]

    def effects(self, call: Call) -> list[Effect]:
        from . import _shell

        command = call.arguments.get(self.argument)
        if not isinstance(command, str):
            return []
        cwd = call.state.get("cwd") or self.cwd
        returncode = _returncode(call)
        out = []
        # Scripts an earlier command wrote with a heredoc: a later `python fix.py` writes what they open.
        scripts = call.state.setdefault("shell_scripts", {})
        for e in _shell.effects(command, cwd=cwd, returncode=returncode, scripts=scripts):
            out.append(Effect(e.access, (("path", e.path),), e.lines, e.part))
        return out


_RETURNCODE = re.compile(r"^\s*<returncode>\s*(-?\d+)\s*</returncode>")


def _returncode(call: Call) -> int | None:
    """The command's exit status: mini-swe-agent's `<returncode>N</returncode>`, else the result's status."""
    m = _RETURNCODE.match(call.result or "")
    if m is not None:
        return int(m.group(1))
    return 1 if call.status == "error" else None


def shell(argument: str = "command", *, cwd: str | None = None) -> Declaration:
    """A shell tool: each command's file reads (`cat`, `head`, `tail`, `nl`, `sed -n 'a,bp'`, `grep`
    on named files, with their ranges) and writes (`sed -i`, `>`/`>>`, `tee`, heredocs, `cp`/`mv`
    onto a path, `rm`, inline patches, Python scripts opening a path for writing), pipes and `&&`
    chains read part by part; `cwd` resolves relative paths. Anything not recognised claims
    nothing; a command that failed (a non-zero `<returncode>`, an error status) writes nothing."""
    if cwd is not None and not (isinstance(cwd, str) and cwd.startswith("/")):
        raise SDKError(f"shell(cwd=...): expected an absolute directory, got {cwd!r}")
    return Shell(_check_name("shell", argument, "argument"), cwd)


# --------------------------------------------------------------------------- SWE-agent


_FILE_HEADER = re.compile(r"^\[File: (.+?) \(\d+ lines total\)\]", re.M)
_OPEN_FILE = re.compile(r"^\(Open file: (.+?)\)\s*$", re.M)
_CURRENT_DIR = re.compile(r"^\(Current directory: (.+?)\)\s*$", re.M)


class _SweState:
    """SWE-agent's session state, as its observations report it: the open file and the directory."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def resolve(self, call: Call, path: str | None) -> str | None:
        if not path or path == "n/a":
            return None
        base = call.state.get("cwd") or self.cwd
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(base, path))

    def observe(self, call: Call) -> None:
        """After a call: the directory and open file its observation names."""
        d = _CURRENT_DIR.search(call.result or "")
        if d is not None and d.group(1).startswith("/"):
            call.state["cwd"] = d.group(1)
        opened = _OPEN_FILE.search(call.result or "")
        if opened is not None:
            call.state["open_file"] = self.resolve(call, opened.group(1))
        else:
            header = _FILE_HEADER.search(call.result or "")
            if header is not None:
                call.state["open_file"] = self.resolve(call, header.group(1))


class _SweTool(Declaration):
    """One of SWE-agent's tools: `kind` is "window" (shows a window of the open file), "write" (changes
    the open file, or `path_arg`'s), or "create"."""

    def __init__(self, state: _SweState, kind: str, path_arg: str | None = None) -> None:
        self.state, self.kind, self.path_arg = state, kind, path_arg

    reads_objects = True
    writes_objects = True

    def arguments(self) -> list[str]:
        return [self.path_arg] if self.path_arg else []

    def effects(self, call: Call) -> list[Effect]:
        before = call.state.get("open_file")
        named = self.state.resolve(call, _scalar(call.arguments.get(self.path_arg))) if self.path_arg else None
        header = _FILE_HEADER.search(call.result or "")
        shown = self.state.resolve(call, header.group(1)) if header is not None else None
        self.state.observe(call)
        out: list[Effect] = []
        target = named or (before if self.kind == "write" else None) or shown
        if self.kind in ("write", "create") and target and call.status in ("success", None):
            out.append(Effect("write", (("path", target),), replaces=self.kind == "create"))
        if shown is not None and (self.kind == "window" or out):
            # The observation shows a window of the file (after the write, for an edit).
            out.append(Effect("read", (("path", shown),), shown_lines(call.result), None if shown_lines(call.result) else "a window"))
        return out


class _SweShell(Shell):
    """SWE-agent's `bash`: a shell, whose observation also reports the directory and open file."""

    def __init__(self, state: _SweState) -> None:
        super().__init__("command", state.cwd)
        self.state = state

    def effects(self, call: Call) -> list[Effect]:
        found = super().effects(call)
        self.state.observe(call)
        return found


def swe_agent(cwd: str = "/testbed") -> dict[str, Declaration]:
    """Declarations for SWE-agent's tools (`Session(tools=sdk.swe_agent())`): `open`, `goto`,
    `scroll_up`, `scroll_down` show a window of the open file (the lines its numbered output shows);
    `edit` and `insert` change the open file (they name no path: the session's state does, as each
    observation's `(Open file: ...)` reports it); `create` writes a new file; `bash` is a shell;
    `str_replace_editor` is the text editor. Relative paths resolve against the directory the
    observations report (`cwd` until one does)."""
    state = _SweState(cwd)
    editor = text_editor()
    tools: dict[str, Declaration] = {
        "open": _SweTool(state, "window", "path"),
        "goto": _SweTool(state, "window"),
        "scroll_up": _SweTool(state, "window"),
        "scroll_down": _SweTool(state, "window"),
        "edit": _SweTool(state, "write"),
        "insert": _SweTool(state, "write"),
        "create": _SweTool(state, "create", "filename"),
        "bash": _SweShell(state),
        "str_replace_editor": editor,
    }
    for decl in tools.values():
        decl.optional = True  # SWE-agent configurations offer different subsets of these tools
    return tools


# --------------------------------------------------------------------------- checking


def declarations(tools: Any) -> dict[str, Declaration]:
    """`Session(tools=...)`, checked: tool name -> declaration."""
    if tools is None:
        return {}
    if not isinstance(tools, dict):
        raise SDKError("tools: expected {tool name: sdk.reads(...) | sdk.writes(...) | sdk.about(...) | sdk.shell(...) | ...}")
    for name, decl in tools.items():
        if not isinstance(name, str) or not name:
            raise SDKError(f"tools: {name!r} is not a tool name")
        if not isinstance(decl, Declaration):
            raise SDKError(f"tools.{name}: expected sdk.reads(...), sdk.writes(...), sdk.about(...), sdk.commands(...), "
                           "sdk.text_editor(), sdk.shell(...) or one of sdk.swe_agent()")
    return dict(tools)


def check_against(declared: dict[str, Declaration], definitions: list[dict[str, Any]], *, warn_missing: bool,
                  checked: set[str]) -> list[str]:
    """Each declaration against the step's tool schemas (once per tool): an argument the schema does not
    list is an error naming both; a declared tool missing from the step's tools is an error, or with
    `warn_missing` a warning (returned for the caller to emit). `checked` remembers what passed."""
    by_name = {d["name"]: d for d in definitions}
    warnings: list[str] = []
    for name, decl in declared.items():
        spec = by_name.get(name)
        if spec is None and decl.optional:
            continue
        if spec is None:
            problem = (f"tools.{name}: declared in Session(tools=...) but not among this step's tools "
                       f"({', '.join(by_name) or 'none'})")
            if not warn_missing:
                raise SDKError(problem + "; check the name, or Session(check_tools='warn') for a tool offered later")
            warnings.append(problem)
            continue
        if name in checked:
            continue
        properties = (spec.get("parameters") or {}).get("properties")
        if isinstance(properties, dict) and properties:
            for arg in decl.arguments():
                if arg not in properties:
                    raise SDKError(f"tools.{name}: the declaration names argument {arg!r}, which tool {name!r} does not have "
                                   f"(its arguments: {', '.join(properties)})")
        checked.add(name)
    return warnings
