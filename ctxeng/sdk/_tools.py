"""Tool declarations: which object a tool reads or writes, and whose data its result is.

    session = sdk.Session("coding-agent", tools={
        "read_file": sdk.reads("path"),      # its result is the file at `path`, as of now
        "edit_file": sdk.writes("path"),     # a successful call changes the file at `path`
    })
    session = sdk.Session("chat-agent", principal={..., "project": "customer-4411"}, tools={
        "get_orders": sdk.about("customer_id"),   # its result is that customer's data
    })

Declared once per session, read from each call's own arguments. A result of a reading tool names
its object in its source_ref (`path`, `url`, `memory_id`, `artifact_id`, or `object:
"<argument>=<value>"` for any other argument) with the object's revision as the session has seen it
(the number of successful declared writes before it in the history); a write's result names the
new revision and `access: write`. The engine keeps only the newest reading of each object: an
earlier reading differing from a later one, or followed by a write, is `stale_revision`, naming the
newer item (ctxeng.engine.gates.supersessions). `about=` names the argument saying whose data the
result is: the result's scope is `scope(value)` (default `<tenant>/<value>`: the subject is a
project of the session's tenant), so a result about another subject than the session's is refused
by the scope gate. Tools not declared behave as before: their results are untrusted data with
their call as their only identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SDKError

# Arguments that already name an object the engine recognizes by that source_ref field.
_REF_FIELDS = ("path", "url", "memory_id", "artifact_id")


@dataclass(frozen=True)
class ToolDeclaration:
    """What a tool's calls do: read or write the object named by `object_arg`, about `about_arg`."""

    access: str | None = None  # "read", "write", or None (only `about`)
    object_arg: str | None = None
    about_arg: str | None = None
    scope: Callable[[Any], str] | None = None

    def object_ref(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The source_ref fields naming the object a call with these arguments reads or writes."""
        if self.object_arg is None:
            return {}
        value = arguments.get(self.object_arg)
        if value is None or isinstance(value, (dict, list, bool)):
            return {}
        if self.object_arg in _REF_FIELDS:
            return {self.object_arg: str(value)}
        return {"object": f"{self.object_arg}={value}"}

    def subject(self, arguments: dict[str, Any]) -> Any:
        return None if self.about_arg is None else arguments.get(self.about_arg)


def _arg(builder: str, name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise SDKError(f"{builder}({what}=...): expected the name of the tool's argument, got {name!r}")
    return name


def _scope(builder: str, scope: Any) -> Callable[[Any], str] | None:
    if scope is not None and not callable(scope):
        raise SDKError(f"{builder}(scope=...): expected a function of the argument's value returning a scope")
    return scope


def reads(argument: str, *, about: str | None = None, scope: Callable[[Any], str] | None = None) -> ToolDeclaration:
    """The tool returns the current content of the object its `argument` names (a later reading or
    a write of the same object makes this result stale)."""
    return ToolDeclaration("read", _arg("reads", argument, "argument"), about and _arg("reads", about, "about"), _scope("reads", scope))


def writes(argument: str, *, about: str | None = None, scope: Callable[[Any], str] | None = None) -> ToolDeclaration:
    """A successful call changes the object its `argument` names: every earlier reading is stale."""
    return ToolDeclaration("write", _arg("writes", argument, "argument"), about and _arg("writes", about, "about"), _scope("writes", scope))


def about(argument: str, *, scope: Callable[[Any], str] | None = None) -> ToolDeclaration:
    """The tool's result is data about the subject its `argument` names (a customer, an account):
    its scope is `scope(value)` (default `<tenant>/<value>`), so another subject's data is refused."""
    return ToolDeclaration(None, None, _arg("about", argument, "argument"), _scope("about", scope))


def declarations(tools: Any) -> dict[str, ToolDeclaration]:
    """`Session(tools=...)`, checked: tool name -> declaration."""
    if tools is None:
        return {}
    if not isinstance(tools, dict):
        raise SDKError("tools: expected {tool name: sdk.reads(...) | sdk.writes(...) | sdk.about(...)}")
    for name, decl in tools.items():
        if not isinstance(name, str) or not name:
            raise SDKError(f"tools: {name!r} is not a tool name")
        if not isinstance(decl, ToolDeclaration):
            raise SDKError(f"tools.{name}: expected sdk.reads(...), sdk.writes(...) or sdk.about(...)")
    return dict(tools)
