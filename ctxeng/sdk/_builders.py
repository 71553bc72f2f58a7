"""Builders for the candidates that are not messages: code, web pages, files, memory, plans,
summaries and stored artifacts.

Each builder fills what it can compute (the content hash, the source_ref its source type needs, the
time it was observed) and refuses what it cannot guess, with an error naming the argument
(`code(commit=...): required: ...`). The session fills the rest when the item is submitted: scope
and producer from the session, unless given here. Every builder takes `item_id=` (default: derived
from the source, so the same source gets the same id at every step), `kind=` (to match a policy's
partitions), and any further candidate field by name (`relevance=0.9`, `stages=[...]`,
`required=True`, `freshness=...`).

| builder | kind | source_type | intended_role | source_ref |
| code(repo, commit, path, lines, text) | code | repository_source | untrusted_data | {repo, commit, path, lines} |
| web(url, text, fetched_at=None) | web_page | web_document | untrusted_data | {url, content_hash} |
| file(path, text, revision=None) | file | editable_project_file | untrusted_data | {path[, revision]} |
| memory(text, memory_id) | memory | memory_object | untrusted_data | {memory_id} |
| plan(text, plan_id, revision) | plan | editable_project_file | untrusted_data | {artifact_id, revision} |
| summary(text, inputs) | summary | model_summary | derived_context | {summary_id} |
| artifact(artifact_id, revision, kind, content_hash, writer) | (its kind) | artifact | untrusted_data | {artifact_id, revision} |

The task's state parts, which a policy may hold resident (`resident.include`: a step without one
is blocked; the research-agent starter requires all five). The first three are the task as the
user stated it (`user_request`, `task_intent`), the last two the runtime's state of it
(`runtime_state`, `state`); each is located by its own id (`source_ref.object_id`), one per kind,
so each step's new text replaces the last:

| goal(text) | goal | user_request | task_intent | {object_id: goal} |
| hard_constraints(text or [rules]) | hard_constraints | user_request | task_intent | {object_id: hard-constraints} |
| repository_manifest({repo: commit}) | required_repository_manifest | user_request | task_intent | {object_id: required-repo-manifest} |
| current_stage(text) | current_stage | runtime_state | state | {object_id: current-stage} |
| open_items({id: text} or [text]) | open_items_summary | runtime_state | state | {object_id: open-items} |
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from ._messages import content_hash
from .errors import SDKError

_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_LINES = re.compile(r"^\d+-\d+$")
_FIELDS = {
    "relevance", "stages", "required", "freshness", "load_mode", "security_class", "completeness", "claim",
    "open_item_ids", "source_refs", "preserves", "input_range", "source_request_id", "source_lineage", "trust",
    "intended_role", "scope", "producer", "observed_at", "revision", "source_type",
}


@dataclass(frozen=True)
class Item:
    """A candidate built by a builder; the session completes it (scope, producer) at `step`."""

    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def item_id(self) -> str:
        return self.fields["item_id"]

    def candidate(self, *, scope: str, producer: str) -> dict[str, Any]:
        return {"scope": scope, "producer": producer, **self.fields}


def _required(builder: str, **values: Any) -> None:
    for name, value in values.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            raise SDKError(f"{builder}({name}=...): required")


def _text(builder: str, text: Any) -> str:
    if not isinstance(text, str):
        raise SDKError(f"{builder}(text=...): expected the content as a string, got {type(text).__name__}")
    return text


def _id(prefix: str, *parts: Any) -> str:
    return f"{prefix}-" + hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:16]


def _time(builder: str, name: str, value: Any) -> str:
    if value is None:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise SDKError(f"{builder}({name}=...): a naive datetime has no zone; give an aware one (UTC)")
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise SDKError(f"{builder}({name}=...): {value!r} is not an ISO 8601 time") from None
        return value
    raise SDKError(f"{builder}({name}=...): expected a datetime or an ISO 8601 string")


def _item(builder: str, extra: dict[str, Any], **fields: Any) -> Item:
    unknown = sorted(set(extra) - _FIELDS)
    if unknown:
        raise SDKError(f"{builder}({unknown[0]}=...): not a candidate field")
    return Item({**fields, **extra})


def code(repo: str, commit: str, path: str, lines: str | tuple[int, int], text: str, *, item_id: str | None = None,
         kind: str = "code", **extra: Any) -> Item:
    """An excerpt of a repository at a fixed commit: `lines` is `"149-200"` or `(149, 200)`."""
    _required("code", repo=repo, commit=commit, path=path, lines=lines)
    if not _COMMIT.match(str(commit)):
        raise SDKError(f"code(commit=...): {commit!r} is not a commit id (hex); a branch name moves, so evidence pins a commit")
    if isinstance(lines, tuple):
        if len(lines) != 2 or not all(isinstance(n, int) and n > 0 for n in lines) or lines[0] > lines[1]:
            raise SDKError(f"code(lines=...): expected (first, last) line numbers, got {lines!r}")
        lines = f"{lines[0]}-{lines[1]}"
    if not _LINES.match(str(lines)):
        raise SDKError(f"code(lines=...): expected 'first-last' such as '149-200', got {lines!r}")
    text = _text("code", text)
    return _item("code", extra, item_id=item_id or _id("code", repo, commit, path, lines), kind=kind, source_type="repository_source",
                 intended_role="untrusted_data", content=text, content_hash=content_hash(text),
                 source_ref={"repo": repo, "commit": commit, "path": path, "lines": lines}, revision=commit)


def web(url: str, text: str, fetched_at: datetime | str | None = None, *, item_id: str | None = None,
        kind: str = "web_page", **extra: Any) -> Item:
    """A fetched web page: its text is data, fenced, never instructions; `fetched_at` defaults to now."""
    _required("web", url=url)
    if urlparse(url).scheme not in ("http", "https") or not urlparse(url).netloc:
        raise SDKError(f"web(url=...): {url!r} is not an http(s) URL")
    text = _text("web", text)
    digest = content_hash(text)
    return _item("web", extra, item_id=item_id or _id("web", url), kind=kind, source_type="web_document",
                 intended_role="untrusted_data", content=text, content_hash=digest,
                 source_ref={"url": url, "content_hash": digest}, observed_at=_time("web", "fetched_at", fetched_at))


def file(path: str, text: str, revision: int | str | None = None, *, item_id: str | None = None, kind: str = "file",
         **extra: Any) -> Item:
    """A project file (editable by anyone with the repository, so data, never control)."""
    _required("file", path=path)
    text = _text("file", text)
    ref: dict[str, Any] = {"path": path}
    if revision is not None:
        ref["revision"] = revision
    return _item("file", extra, item_id=item_id or _id("file", path, revision), kind=kind, source_type="editable_project_file",
                 intended_role="untrusted_data", content=text, content_hash=content_hash(text), source_ref=ref, revision=revision)


def memory(text: str, memory_id: str, *, item_id: str | None = None, kind: str = "memory", **extra: Any) -> Item:
    """A memory object: a governed candidate, admitted only in the roles the policy gives it.
    `scope=` is the scope the memory was written under (another project's is refused)."""
    _required("memory", memory_id=memory_id)
    text = _text("memory", text)
    return _item("memory", extra, item_id=item_id or _id("memory", memory_id), kind=kind, source_type="memory_object",
                 intended_role="untrusted_data", content=text, content_hash=content_hash(text), source_ref={"memory_id": memory_id})


def plan(text: str, plan_id: str, revision: int | str, *, item_id: str | None = None, kind: str = "plan", **extra: Any) -> Item:
    """A plan file at a revision: an older revision than the one the task requires is stale."""
    _required("plan", plan_id=plan_id, revision=revision)
    text = _text("plan", text)
    return _item("plan", extra, item_id=item_id or f"{plan_id}-r{revision}", kind=kind, source_type="editable_project_file",
                 intended_role="untrusted_data", content=text, content_hash=content_hash(text),
                 source_ref={"artifact_id": plan_id, "revision": revision}, revision=revision)


def summary(text: str, inputs: list[str | Item], *, summary_id: str | None = None, item_id: str | None = None,
            kind: str = "summary", **extra: Any) -> Item:
    """A summary the agent wrote of earlier items (`inputs`: their item ids or Items). The engine
    verifies it (its preservation assertions) and never ranks it above its inputs."""
    if not inputs:
        raise SDKError("summary(inputs=...): required: a summary names the items it summarizes")
    ids = [i.item_id if isinstance(i, Item) else i for i in inputs]
    if not all(isinstance(i, str) and i for i in ids):
        raise SDKError("summary(inputs=...): expected item ids (strings) or Items")
    text = _text("summary", text)
    sid = summary_id or _id("summary", *ids, text)
    return _item("summary", extra, item_id=item_id or sid, kind=kind, source_type="model_summary", intended_role="derived_context",
                 content=text, content_hash=content_hash(text), source_ref={"summary_id": sid}, input_item_ids=ids)


def artifact(artifact_id: str, revision: int | str, *, kind: str | None = None, content_hash: str | None = None,
             writer: str | None = None, item_id: str | None = None, **extra: Any) -> Item:
    """Re-inject a stored artifact revision (seed §7): loaded from the artifact store and re-admitted
    through every gate. `kind`, `content_hash` (the `sha256:` given when it was stored) and `writer`
    (who stored it) are required: ctxeng re-admits an artifact only as what the agent last saw, and
    checks each against the store (`reinjection.require`: content_hash_and_revision, writer_and_source)."""
    _required("artifact", artifact_id=artifact_id, revision=revision, kind=kind, content_hash=content_hash, writer=writer)
    if not re.match(r"^sha256:[0-9a-f]{64}$", str(content_hash)):
        raise SDKError(f"artifact(content_hash=...): expected 'sha256:' and 64 hex digits, got {content_hash!r}")
    return _item("artifact", extra, item_id=item_id or f"{artifact_id}-r{revision}", kind=kind, source_type="artifact",
                 intended_role="untrusted_data", artifact_ref={"artifact_id": artifact_id, "revision": revision},
                 content_hash=content_hash, source_ref={"artifact_id": artifact_id, "revision": revision}, revision=revision,
                 producer=writer)


# --------------------------------------------------------------------------- the task's state parts

# The builder that provides each state part a policy may hold resident (ContextBlocked names it).
STATE_BUILDERS = {
    "goal": "sdk.goal(text)",
    "hard_constraints": "sdk.hard_constraints([rule, ...])",
    "required_repository_manifest": "sdk.repository_manifest({repo: commit})",
    "current_stage": "sdk.current_stage(text)",
    "open_items_summary": "sdk.open_items({item_id: text})",
}


def _part(builder: str, extra: dict[str, Any], text: str, *, kind: str, item_id: str, state: bool) -> Item:
    if not text.strip():
        raise SDKError(f"{builder}(...): required: the text is empty")
    source_type, role = ("runtime_state", "state") if state else ("user_request", "task_intent")
    return _item(builder, extra, item_id=item_id, kind=kind, source_type=source_type, intended_role=role, content=text,
                 content_hash=content_hash(text), source_ref={"object_id": item_id})


def goal(text: str, *, item_id: str = "goal", **extra: Any) -> Item:
    """What the task is for, as the user stated it. A policy that requires a goal and gets none
    takes the first user message's text (`Session.request`)."""
    return _part("goal", extra, _text("goal", text), kind="goal", item_id=item_id, state=False)


def hard_constraints(rules: str | list[str], *, item_id: str = "hard-constraints", **extra: Any) -> Item:
    """The rules every step must keep: a text, or a list of rules numbered `1. ...` one a line."""
    if isinstance(rules, list):
        if not rules or not all(isinstance(r, str) and r.strip() for r in rules):
            raise SDKError("hard_constraints(rules=...): expected a text or a non-empty list of rules (strings)")
        rules = "\n".join(f"{n}. {r.strip()}" for n, r in enumerate(rules, 1))
    return _part("hard_constraints", extra, _text("hard_constraints", rules), kind="hard_constraints", item_id=item_id, state=False)


def repository_manifest(repositories: dict[str, str], *, item_id: str = "required-repo-manifest", **extra: Any) -> Item:
    """The repositories the task must read, each at a fixed commit (`{"pi": "53fa77c..."}`), as the
    worked example's JSON. A branch name moves, so a commit that is not hex is refused."""
    if not isinstance(repositories, dict) or not repositories:
        raise SDKError("repository_manifest(repositories=...): expected {repo: commit}, at least one")
    for repo, commit in repositories.items():
        if not isinstance(commit, str) or not _COMMIT.match(commit):
            raise SDKError(f"repository_manifest(repositories=...): {repo}: {commit!r} is not a commit id (hex)")
    text = json.dumps({"repositories": [{"commit": c, "repo": r} for r, c in repositories.items()]}, sort_keys=True)
    return _part("repository_manifest", extra, text, kind="required_repository_manifest", item_id=item_id, state=False)


def current_stage(text: str, *, item_id: str = "current-stage", **extra: Any) -> Item:
    """Where the task stands (`"stage: drafting; article_draft revision 2"`). A policy that requires
    one and gets none takes `stage: <the step's stage>` (`Session.request`)."""
    return _part("current_stage", extra, _text("current_stage", text), kind="current_stage", item_id=item_id, state=True)


def open_items(items: dict[str, str] | list[str], *, item_id: str = "open-items", **extra: Any) -> Item:
    """What is still open: `{id: text}` (each line `<id> <text>`, the ids in `open_item_ids`), or a
    list of texts numbered `OI-1`, `OI-2` ...; an empty one says so (`none`), not nothing."""
    if isinstance(items, list):
        items = {f"OI-{n}": text for n, text in enumerate(items, 1)}
    if not isinstance(items, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
        raise SDKError("open_items(items=...): expected {item_id: text} or a list of texts")
    text = "\n".join(f"{k} {v}" for k, v in items.items()) or "none"
    return _part("open_items", {"open_item_ids": list(items), **extra}, text, kind="open_items_summary", item_id=item_id, state=True)


def state_defaults(required: list[str], candidates: list[dict[str, Any]], *, stage: str) -> list[Item]:
    """The state parts a policy requires that the step did not give and the session knows: the goal
    is the first user message's text, the current stage the step's stage. The others (constraints,
    repositories, open items) are the caller's to state: the step is blocked naming their builders."""
    given = {c.get("kind") for c in candidates}
    out = []
    if "goal" in required and "goal" not in given:
        first = next((c for c in candidates if c.get("kind") == "user_message"), None)
        if first is not None and first["content"].strip():
            out.append(goal(first["content"]))
    if "current_stage" in required and "current_stage" not in given:
        out.append(current_stage(f"stage: {stage}"))
    return out
