"""Starter policies shipped with the package, loadable by name (docs/starter-policies.md).

    from ctxeng import starters
    starters.names()                  # ["chat-agent", "coding-agent", "research-agent"]
    policy = starters.load("chat-agent")    # a validated ContextPolicy
    yaml_text = starters.text("chat-agent") # the commented YAML (`python -m ctxeng policy init`)

Each starter writes its budget as shares of the model's context limit (`model_context_limit:
model`), so one policy serves models of several sizes. The files are package data next to this
module; nothing here imports the service.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from ..engine import ContextPolicy, parse_policy

# name -> what it is for (`python -m ctxeng policy list`)
SUMMARIES = {
    "chat-agent": "a conversational agent with tools: system prompt, turns, tool pairs, attached material",
    "coding-agent": "an agent working in a repository: code excerpts, test logs, files, plans, web pages, memory",
    "research-agent": "the worked example's multi-repository source research, with budgets in shares",
}
NAMES = tuple(SUMMARIES)


class UnknownStarter(KeyError):
    """No starter policy of that name; the message lists the known ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(name)

    def __str__(self) -> str:
        return f"no starter policy {self.name!r}; known: {', '.join(NAMES)}"


def names() -> list[str]:
    return list(NAMES)


def text(name: str, *, policy_id: str | None = None, revision: int | None = None) -> str:
    """The commented YAML of starter `name`; `policy_id` and `revision` replace its `policy.id` and
    `policy.revision` (the starter's own: its name, revision 1)."""
    if name not in NAMES:
        raise UnknownStarter(name)
    out = resources.files(__package__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    if policy_id is not None:
        out = _replace_header(out, "id", _yaml_scalar(policy_id))
    if revision is not None:
        out = _replace_header(out, "revision", str(revision))
    return out


def load(name: str) -> ContextPolicy:
    return parse_policy(text(name))


_HEADER = re.compile(r"^policy:\n((?:  .*\n)+)", re.MULTILINE)


def _replace_header(yaml_text: str, key: str, value: str) -> str:
    """Rewrite `policy.<key>` in place, so the comments around it are kept."""
    block = _HEADER.search(yaml_text)
    assert block is not None, "a starter has a `policy:` block"
    lines = block.group(1)
    new_lines, n = re.subn(rf"^  {key}: .*$", f"  {key}: {value}", lines, count=1, flags=re.MULTILINE)
    assert n == 1, f"a starter's policy block has a {key}"
    return yaml_text[: block.start(1)] + new_lines + yaml_text[block.end(1) :]


def _yaml_scalar(value: str) -> str:
    """`value` as a YAML string that reads back as itself, whatever it contains."""
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
