"""ctxeng.sdk — put ctxeng between an agent and its model in a few lines.

    from ctxeng import sdk
    session = sdk.Session("chat-agent", model="gpt-4o")
    step = session.step(messages, tools=tools)          # OpenAI, Anthropic or LangChain messages
    response = openai.OpenAI().chat.completions.create(**step.kwargs)
    step.report_usage(response)

The public names are these and nothing else: `Session`, `Step`, `Recorder` (`Session(record=...)`:
a local session's steps recorded to the service in the background), `Item`, the builders `code`, `web`,
`file`, `memory`, `plan`, `summary`, `artifact`, the task's state parts `goal`, `hard_constraints`,
`repository_manifest`, `current_stage`, `open_items` (a policy may require them), the tool declarations `reads`, `writes`,
`about`, `commands`, `text_editor`, `shell`, `swe_agent` (`Session(tools=...)`) with the `Call`
their functions receive, and the errors `SDKError`, `ContextBlocked`.
Framework adapters live in their own modules, each importing its framework only when used:
`ctxeng.sdk.langchain` (LangChain v1 middleware) and `ctxeng.sdk.openai_agents` (OpenAI Agents
SDK input filter). The SDK is part of the light install: it imports no Django, Celery or DRF.
"""

from ._builders import (
    Item,
    artifact,
    code,
    current_stage,
    file,
    goal,
    hard_constraints,
    memory,
    open_items,
    plan,
    repository_manifest,
    summary,
    web,
)
from ._recorder import Recorder
from ._session import Session, Step
from ._tools import Call, about, commands, reads, shell, swe_agent, text_editor, writes
from .errors import ContextBlocked, SDKError

__all__ = [
    "Call",
    "ContextBlocked",
    "Item",
    "Recorder",
    "SDKError",
    "Session",
    "Step",
    "about",
    "artifact",
    "code",
    "commands",
    "current_stage",
    "file",
    "goal",
    "hard_constraints",
    "memory",
    "open_items",
    "plan",
    "reads",
    "repository_manifest",
    "shell",
    "summary",
    "swe_agent",
    "text_editor",
    "web",
    "writes",
]
