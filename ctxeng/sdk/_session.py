"""`Session` and `Step`: one agent run, one assembly per model call.

    session = Session("chat-agent", model="gpt-4o")            # local: the engine in this process
    session = Session("chat-agent", model="gpt-4o", url=URL, token=TOKEN, principal=...)  # remote: REST
    step = session.step(messages, tools=tools)
    response = openai.OpenAI().chat.completions.create(**step.kwargs)
    step.report_usage(response)

A session holds the run: its id, the step counter, the principal and scope, when it first saw each
item (`observed_at` stays the same from step to step), and the previous step's cache record (so the
manifest says whether the stable prefix was a hit). Local and remote build the same request: the
service assembles it with the same engine, so the manifest's decisions and the payload are the
same either way (the assembly id and the seal time differ).
"""

from __future__ import annotations

import copy
import json
import pickle
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _messages, _tools
from ._builders import Item, state_defaults
from ._models import ADAPTER_BY_PROVIDER, model_spec
from .errors import ContextBlocked, SDKError

if TYPE_CHECKING:
    from ..engine.models import ContextPolicy

DEFAULT_TENANT = "local"
DEFAULT_PROJECT = "default"
DEFAULT_STAGE = "default"
PRODUCER = "ctxeng.sdk"
KEEP_STEPS = 20  # the latest steps whose payload and manifests a session keeps (Session(keep_steps=))


class Step:
    """One assembled model call. `kwargs` is what the provider SDK takes; `messages` the same
    context in the caller's own message format, with the caller's own tool-call ids."""

    def __init__(self, *, manifest: Any, payload: dict[str, Any] | None, fmt: str,
                 job_id: str | None = None, dashboard_url: str | None = None,
                 reporter: Callable[[dict[str, int]], dict[str, Any]] | None = None) -> None:
        # The sealed manifest stays as sealed; `manifest` is what the caller reads, with the
        # provider's actual input tokens once `report_usage` recorded them (engine.seal.with_actual_usage).
        # Local, it is the engine's manifest, turned into its JSON form when first read: an agent
        # that never reads it does not wait for that at every step.
        self._sealed = manifest
        self._manifest: dict[str, Any] | None = None
        self._job_id = job_id
        self._payload = payload
        self._retired: bytes | None = None  # set by _retire: the payload and manifests, pickled
        self._kept: int | None = None  # set by _drop: the session's keep_steps when it let go of this step's contents
        self._facts: dict[str, Any] | None = None  # what a dropped step still answers (_summary)
        self.format = fmt
        self.dashboard_url = dashboard_url
        self.usage: dict[str, Any] | None = None
        self._reporter = reporter
        self._traceparent: str | None = None  # local: the assembly span's, when traced (ctxeng.telemetry)

    @property
    def payload(self) -> dict[str, Any] | None:
        """The exact payload the manifest hashes (None for a blocked step); `kwargs` is a copy of it."""
        self._restore()
        return self._payload

    @payload.setter
    def payload(self, value: dict[str, Any] | None) -> None:
        self._restore()
        self._payload = value

    @property
    def sealed_manifest(self) -> dict[str, Any]:
        self._restore()
        if not isinstance(self._sealed, dict):
            self._sealed = self._sealed.model_dump(mode="json")
        return self._sealed

    def _retire(self) -> None:
        """Keep this step's payload and manifests as one pickled value once the session moved past it.

        A session holds every step (`session.steps`), and each holds a payload as long as the
        history and a manifest with a record per item: kept as objects, a long run's steps are
        hundreds of thousands of objects that every full garbage collection walks again (a
        collection every few steps, 130-155 ms each at 165 calls). One bytes value is not walked.
        Reading any of them restores them, equal to what they were."""
        if self._retired is not None or self._kept is not None:
            return
        self._facts = self._summary()
        # The engine's manifest as its JSON text (what `sealed_manifest` reads back): the model's
        # own serializer is quicker than making its dict first.
        sealed = self._sealed if isinstance(self._sealed, dict) else self._sealed.model_dump_json().encode()
        try:
            self._retired = pickle.dumps((self._payload, sealed, self._manifest), pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):  # a value of the caller's that pickle refuses: kept as it is
            return
        self._payload = self._sealed = self._manifest = None

    def _summary(self) -> dict[str, Any]:
        """What a step still answers once the session let go of its contents (`keep_steps`)."""
        if self._manifest is None and not isinstance(self._sealed, dict):  # the engine's model, not turned into JSON
            assembly = self._sealed.assembly
            reason = assembly.blocked_reason
            return {"assembly_id": self._job_id or assembly.id, "status": assembly.status.value,
                    "blocked_reason": getattr(reason, "value", reason), "step_id": assembly.step_id}
        return {"assembly_id": self.assembly_id, "status": self.status, "blocked_reason": self.blocked_reason,
                "step_id": self.manifest["assembly"]["step_id"]}

    def _drop(self, keep_steps: int) -> None:
        """Let go of the payload and manifests (the session keeps the last `keep_steps` steps'):
        the step still answers `assembly_id`, `status`, `ready`, `blocked_reason` and `usage`."""
        if self._kept is not None:
            return
        if self._facts is None:
            self._facts = self._summary()
        self._kept = keep_steps
        self._retired = None
        self._payload = self._sealed = self._manifest = None

    def _restore(self) -> None:
        if self._kept is not None:
            raise SDKError(f"step {self._facts['step_id']}: its payload and manifest were let go: the session keeps "  # type: ignore[index]
                           f"those of its last {self._kept} steps (Session(keep_steps=...); None keeps every step's); "
                           "assembly_id, status, blocked_reason and usage remain")
        if self._retired is not None:
            self._payload, sealed, self._manifest = pickle.loads(self._retired)  # noqa: S301 - our own bytes
            self._sealed = json.loads(sealed) if isinstance(sealed, bytes) else sealed
            self._retired = None

    @property
    def manifest(self) -> dict[str, Any]:
        self._restore()
        return self._manifest if self._manifest is not None else self.sealed_manifest

    @manifest.setter
    def manifest(self, value: dict[str, Any]) -> None:
        self._restore()
        self._manifest = value

    @property
    def status(self) -> str:
        if self._kept is not None:
            return self._facts["status"]  # type: ignore[index]
        self._restore()
        if not isinstance(self._sealed, dict) and self._manifest is None:
            return self._sealed.assembly.status.value
        return self.manifest["assembly"]["status"]

    @property
    def blocked_reason(self) -> str | None:
        if self._kept is not None:
            return self._facts["blocked_reason"]  # type: ignore[index]
        return self.manifest["assembly"].get("blocked_reason")

    @property
    def assembly_id(self) -> str:
        """Remote: the service's job id (what its API and dashboard URLs take); local: the manifest's id."""
        if self._kept is not None:
            return self._facts["assembly_id"]  # type: ignore[index]
        return self._job_id or self.manifest["assembly"]["id"]

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def _cache_record(self) -> dict[str, Any] | None:
        """The sealed manifest's `cache` record, for the next step's `previous_cache`."""
        self._restore()
        if not isinstance(self._sealed, dict):
            return self._sealed.cache.model_dump(mode="json")
        return self._sealed.get("cache")

    def raise_for_status(self) -> Step:
        if not self.ready or self.payload is None:
            raise ContextBlocked(self)
        return self

    @property
    def kwargs(self) -> dict[str, Any]:
        """A copy of the exact payload the manifest hashes (`serialized_model_input_hash`): for
        `openai_chat`, `chat.completions.create(**kwargs)`; for `anthropic_messages`,
        `messages.create(**kwargs)`; for `openai_responses`, `responses.create(**kwargs)`.
        Raises `ContextBlocked` for a blocked step."""
        return copy.deepcopy(self.raise_for_status().payload)  # type: ignore[arg-type]

    @property
    def messages(self) -> list[Any]:
        """The assembled messages in the caller's format (OpenAI dicts and LangChain messages
        with the system message first; Anthropic's without it, see `system`)."""
        return self._caller()[1]

    @property
    def system(self) -> str | None:
        """The assembled system text: the control items and the data-boundary notice."""
        return self._caller()[0]

    def _caller(self) -> tuple[str | None, list[Any]]:
        self.raise_for_status()
        restored = _messages.restore_call_ids(self.payload, self.manifest)  # type: ignore[arg-type]
        return _messages.in_format(restored, self.format)

    def report_usage(self, response: Any) -> dict[str, Any]:
        """Record the provider's usage for this step (an OpenAI or Anthropic SDK response or its
        dict, or a LangChain AIMessage with `usage_metadata`): remote, posted to the assembly's
        `usage/`; local, kept on `step.usage` beside the estimate."""
        from ..client import usage_from_response

        metadata = getattr(response, "usage_metadata", None)
        if isinstance(metadata, dict) and metadata.get("input_tokens") is not None:
            # LangChain's input_tokens is the whole prompt (its integrations add cached reads and
            # cache writes in); input_token_details.cache_read is the cached part.
            details = metadata.get("input_token_details") or {}
            usage = {"input_tokens": int(metadata["input_tokens"]), "cached_tokens": int(details.get("cache_read") or 0),
                     "output_tokens": int(metadata.get("output_tokens") or 0)}
        else:
            usage = usage_from_response(response)
        estimate = self.manifest["budget"].get("payload_tokens")
        # A blocked step made no call: the service refuses its report (409), and locally
        # with_actual_usage does; a refused report leaves the step as it was, with no usage.
        if self._reporter is not None:
            reported = self._reporter(usage)
            self.manifest = _with_actual_usage(self.sealed_manifest, usage["input_tokens"])
            self.usage = {**usage, "estimated_input_tokens": estimate}
            return reported
        self.manifest = _with_actual_usage(self.sealed_manifest, usage["input_tokens"])
        self.usage = {**usage, "estimated_input_tokens": estimate}
        if self._traceparent is not None:
            from .. import telemetry

            telemetry.record_local_usage(parent=self._traceparent, manifest=self.manifest, usage=self.usage)
        return self.usage

    def __repr__(self) -> str:
        step_id = self._facts["step_id"] if self._kept is not None else self.manifest["assembly"]["step_id"]  # type: ignore[index]
        return f"<Step {step_id} {self.status} {self.assembly_id}>"


def _with_actual_usage(manifest: Any, input_tokens: int) -> Any:
    """engine.seal.with_actual_usage, imported when usage is first reported (a light `import ctxeng.sdk`)."""
    from ..engine.seal import with_actual_usage

    return with_actual_usage(manifest, input_tokens)


def _is_policy(policy: Any) -> bool:
    """A parsed policy (not a server reference); the engine is imported when a session first needs it,
    so `import ctxeng.sdk` stays light."""
    from ..engine.models import ContextPolicy

    return isinstance(policy, ContextPolicy)


def _load_policy(policy: Any) -> ContextPolicy | dict[str, Any]:
    """A parsed policy (local), or, for `"<id>@<revision>"`, the reference to one on the server."""
    from ..engine import parse_policy
    from ..engine.errors import InvalidInput
    from ..engine.models import ContextPolicy

    if isinstance(policy, ContextPolicy):
        return policy
    try:
        if isinstance(policy, dict):
            return parse_policy(policy)
        if isinstance(policy, Path) or (isinstance(policy, str) and Path(policy).suffix in (".yaml", ".yml", ".json")):
            path = Path(policy)
            if not path.is_file():
                raise SDKError(f"policy: no file {str(path)!r}")
            return parse_policy(path.read_text(encoding="utf-8"))
    except InvalidInput as exc:
        raise SDKError("policy: " + "; ".join(exc.errors)) from None
    if isinstance(policy, str):
        from .. import starters

        if policy in starters.names():
            return starters.load(policy)
        if "@" in policy:
            pid, _, rev = policy.rpartition("@")
            if not pid or not rev.isdecimal():
                raise SDKError(f"policy: {policy!r} is not '<id>@<revision>'")
            return {"id": pid, "revision": int(rev)}
        raise SDKError(f"policy: {policy!r} is not a starter policy ({', '.join(starters.names())}), a file, or '<id>@<revision>'")
    raise SDKError("policy: expected a starter name, a path, a dict, or '<id>@<revision>'")


class Session:
    """An agent run assembled step by step under one policy.

    `policy`: a starter name (`chat-agent`, `coding-agent`, `research-agent`), a path to a YAML or
    JSON policy, a dict, or `"<id>@<revision>"` of a policy published on the server (remote only).
    Remote, a starter name runs under the server's current revision of that policy id, a path or
    dict under exactly its own id and revision (published on the server).
    `url`, `token`: assemble through the ctxeng service instead of in this process.
    `run_id`: default a new `run-<uuid>`. `model`: a known name or `{name, provider, context_limit}`.
    `adapter`: default from the model's provider (`openai_chat`, `anthropic_messages`);
    `"openai_responses"` serializes for the OpenAI Responses API (`client.responses.create`).
    `principal`: `{id, tenant, project[, permissions]}` (default `agent`, `local`/`default`; remote:
    the tenant your token acts for). `scope`: default `<tenant>/<project>/<run_id>`. `producer`:
    recorded on every candidate the session builds (default `ctxeng.sdk`); the starters'
    `trust.producers` admit system, user and runtime-state text only from `ctxeng.sdk`, so another
    name needs a policy that lists it.
    `artifacts`: local re-injection store, `lookup(artifact_id, revision) -> StoredArtifact | None`
    or a directory as the CLI's `--artifacts`. `stage`: the default stage of each step.
    `tool_sources`: tool name -> the source type of its results (default `tool_output`), e.g.
    `{"run_tests": "test_log"}` so a policy's `test_log` source limit keeps a long log's failures.
    `record`: an `sdk.Recorder` (local sessions): each step's request and sealed manifest are sent to
    the service in the background, where a worker verifies them (ctxeng.sdk._recorder); the step
    never waits for that. `close()` (or leaving `with Session(...)`) flushes it within its deadline.
    `tools`: tool name -> `sdk.reads(arg)`, `sdk.writes(arg)` or `sdk.about(arg)` (ctxeng.sdk._tools):
    which object a tool's calls read or change, so only the newest reading of each reaches the
    model (older ones are `stale_revision`), and whose data its result is, so another subject's is
    refused by the scope gate. Tools not declared behave as before.
    `keep_steps`: how many of the latest steps keep their payload and manifests in `session.steps`
    (default 20; `None`: every step's). Each holds a payload as long as its history, so a long run's
    steps would otherwise keep steps x history (about 2 GB over a 1,000-call run); an older step
    still answers `assembly_id`, `status`, `ready`, `blocked_reason` and `usage`, and reading its
    payload or manifest raises `SDKError` naming `keep_steps`.
    """

    def __init__(self, policy: Any, *, url: str | None = None, token: str | None = None, run_id: str | None = None,
                 model: Any = "gpt-4o", adapter: str | None = None, principal: dict[str, Any] | None = None,
                 scope: str | None = None, producer: str | None = None, artifacts: Any = None,
                 stage: str = DEFAULT_STAGE, tool_sources: dict[str, str] | None = None, tools: dict[str, Any] | None = None,
                 check_tools: str = "error", timeout: float = 120.0, record: Any = None,
                 keep_steps: int | None = KEEP_STEPS) -> None:
        if url is not None and record is not None:
            raise SDKError("record: for a local session (a remote session's steps are on the service already); drop url=")
        if url is not None and not token:
            raise SDKError("token: required with url= (an agent token: manage.py issue_token)")
        if url is None and principal is None:
            principal = {"id": "agent", "tenant": DEFAULT_TENANT, "project": DEFAULT_PROJECT}
        if url is not None and principal is None:
            raise SDKError("principal: required with url= ({id, tenant, project}: the tenant your token acts for)")
        missing = [k for k in ("id", "tenant", "project") if not (principal or {}).get(k)]
        if missing:
            raise SDKError(f"principal.{missing[0]}: field required")
        self.policy = _load_policy(policy)
        self._parsed = _is_policy(self.policy)  # a policy parsed here, not a reference to one on a server
        self._starter = isinstance(policy, str) and self._parsed and policy == self.policy.policy.id
        if url is None and isinstance(self.policy, dict):
            raise SDKError(f"policy: {policy!r} names a policy on a server; give url= and token=, or a starter name, path or dict")
        self.model = model_spec(model)
        self.adapter = adapter or ADAPTER_BY_PROVIDER.get(self.model["provider"], "openai_chat")
        self.principal = dict(principal)  # type: ignore[arg-type]
        self.run_id = run_id or f"run-{uuid.uuid4().hex[:16]}"
        self.scope = scope or f"{self.principal['tenant']}/{self.principal['project']}/{self.run_id}"
        self.producer = producer or PRODUCER
        self.stage = stage
        if keep_steps is not None and (isinstance(keep_steps, bool) or not isinstance(keep_steps, int) or keep_steps < 1):
            raise SDKError(f"keep_steps: expected a whole number of at least 1, or None (every step), got {keep_steps!r}")
        self.keep_steps = keep_steps
        self.steps: list[Step] = []
        self._seen_at: dict[str, str] = {}
        self._previous_cache: dict[str, Any] | None = None
        # What the session has read before, so a message seen at an earlier step is not hashed again.
        self._digests = _messages.Digests()
        self._roles: dict[str, str] = {}  # source type -> the role of its tool results (_result_role)
        self._artifacts = _artifact_store(artifacts)
        self.tool_sources = dict(tool_sources or {})
        self.tools = _tools.declarations(tools)
        if check_tools not in ("error", "warn"):
            raise SDKError(f"check_tools: expected 'error' or 'warn', got {check_tools!r}")
        self.check_tools = check_tools
        self._checked_tools: set[str] = set()  # declared tools whose arguments the step's schema confirmed
        self._typed: dict[str, Any] = {}  # Anthropic client tools declared by their type (text editor, bash)
        self._warned: set[tuple[str, str]] = set()  # declared arguments a call did not give, warned once
        self.revisions: dict[str, int] = {}  # "<field>=<value>" -> successful declared writes of each object in the history
        self._client = None
        if url is not None:
            from ..client import Client

            self._client = Client(url, token)  # type: ignore[arg-type]
        self._timeout = timeout
        self.record = record
        self._record_failed = False

    @property
    def remote(self) -> bool:
        return self._client is not None

    # ------------------------------------------------------------------ building the request

    def request(self, messages: Any, *, tools: Any = None, items: Iterable[Item | dict[str, Any]] = (),
                stage: str | None = None, format: str | None = None, system: Any = None,
                **params: Any) -> tuple[dict[str, Any], str]:
        """The assembly request `step` would submit (and the detected format), without assembling."""
        fmt = format or _messages.detect_format(messages, system=system)
        neutral = _messages.to_neutral(messages, fmt, system=system)
        definitions = _messages.tool_definitions(tools)
        if self.tools and tools is not None:
            for problem in _tools.check_against(self.tools, definitions, warn_missing=self.check_tools == "warn",
                                                checked=self._checked_tools):
                warnings.warn(problem, stacklevel=3)
        declared = self.tools
        typed = [d for d in definitions if d.get("type") and d["name"] not in self.tools]
        if typed:  # Anthropic's text editor and bash tools are declared by their type, unless the caller declared them
            for d in typed:
                if d["name"] not in self._typed:
                    self._typed[d["name"]] = _tools.text_editor() if d["type"].startswith("text_editor") else _tools.shell()
            declared = {**{d["name"]: self._typed[d["name"]] for d in typed}, **self.tools}
        built = _messages.MessageItems(self.tool_sources, self._result_role, declared, self._subject_scope, self._digests,
                                       warned=self._warned)
        built.read(neutral)
        self.revisions.update({f"{k}={v}": n for (k, v), n in built.revisions.items()})
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        candidates = []
        for cand in built.candidates:
            # A declared tool's result about a subject carries that subject's scope (sdk.about).
            candidates.append({**cand, "scope": cand.get("scope", self.scope), "producer": self.producer,
                               "observed_at": self._seen_at.setdefault(cand["item_id"], now)})
        for i, item in enumerate(items):
            candidates.append(self._extra_item(item, i, now))
        if self._parsed and self.policy.resident.include:  # the required state parts the session knows (the goal, the stage)
            for part in state_defaults(self.policy.resident.include, candidates, stage=stage or self.stage):
                candidates.append(self._extra_item(part, len(candidates), now))
        if self._parsed:
            ref: dict[str, Any] = {"id": self.policy.policy.id, "revision": self.policy.policy.revision}
            if self.remote and self._starter:  # the server's current revision of the starter (an editor may have revised it)
                ref = {"id": self.policy.policy.id}
        else:
            ref = dict(self.policy)
        request: dict[str, Any] = {
            "run_id": self.run_id,
            "step_id": f"step-{len(self.steps) + 1}",
            "policy": ref,
            "principal": self.principal,
            "scope": self.scope,
            "stage": stage or self.stage,
            "model": self.model,
            "adapter": self.adapter,
            "tool_calls": built.tool_calls,
            "tools": definitions,
            "candidates": candidates,
        }
        if params:
            request["params"] = params
        if self._previous_cache is not None:
            request["previous_cache"] = self._previous_cache
        return request, fmt

    def _subject_scope(self, subject: Any) -> str:
        """The scope of data about `subject` (sdk.about without scope=): a project of the tenant."""
        return f"{self.principal['tenant']}/{subject}"

    def _result_role(self, source_type: str) -> str:
        """The role of a tool result of `source_type`: untrusted data, unless the policy's trust for
        that source type may not be data (a policy mapping a tool's output to `trusted_state` makes
        it state, seed `default_by_source`); then the first role its `role_limits` allow. A policy
        on a server (not parsed here) is read as the seed's table: `runtime_state` is state."""
        role = self._roles.get(source_type)
        if role is None:
            role = self._roles[source_type] = self._role_of_results(source_type)
        return role

    def _role_of_results(self, source_type: str) -> str:
        if not self._parsed:
            return "state" if source_type == "runtime_state" else "untrusted_data"
        trust = self.policy.trust.default_by_source.get(source_type)
        allowed = [r.value for r in self.policy.role_limits.get(trust, [])] if trust is not None else []
        if not allowed or "untrusted_data" in allowed:
            return "untrusted_data"
        return allowed[0]

    def _extra_item(self, item: Item | dict[str, Any], i: int, now: str) -> dict[str, Any]:
        if isinstance(item, Item):
            cand = item.candidate(scope=self.scope, producer=self.producer)
        elif isinstance(item, dict):
            cand = {"scope": self.scope, "producer": self.producer, **item}
            if isinstance(cand.get("content"), str) and "content_hash" not in cand:
                cand["content_hash"] = _messages.content_hash(cand["content"])
        else:
            raise SDKError(f"items[{i}]: expected an item from a builder (sdk.code, sdk.web, ...) or a candidate dict")
        cand.setdefault("observed_at", self._seen_at.setdefault(str(cand.get("item_id")), now))
        return cand

    # ------------------------------------------------------------------ assembling

    def step(self, messages: Any, *, tools: Any = None, items: Iterable[Item | dict[str, Any]] = (),
             stage: str | None = None, format: str | None = None, system: Any = None, **params: Any) -> Step:
        """Assemble the context of the next model call from the agent's history (`messages`), its
        tools and any further items. Returns the `Step` whether ready or blocked; `step.kwargs`
        and `step.messages` raise `ContextBlocked` when it is blocked.

        `params`: the provider's own request parameters (`max_tokens`, `temperature`,
        `tool_choice`, ...), carried unchanged into `step.kwargs`; the budget reserves at least the
        reply size they ask for (`max_tokens`, `max_completion_tokens`, `max_output_tokens`)."""
        request, fmt = self.request(messages, tools=tools, items=items, stage=stage, format=format, system=system, **params)
        step = self._remote(request, fmt) if self.remote else self._local(request, fmt)
        if self.steps:
            self.steps[-1]._retire()
        self.steps.append(step)
        if self.keep_steps is not None and len(self.steps) > self.keep_steps:
            self.steps[-self.keep_steps - 1]._drop(self.keep_steps)
        if step.ready:  # a blocked step sent nothing, so the provider's cache is still the last sent step's
            self._previous_cache = step._cache_record()
        return step

    def close(self, timeout: float | None = None) -> bool:
        """End the session: with `record=`, wait until its steps are sent, at most `timeout` s (the
        recorder's `flush_timeout` by default); True when nothing is left pending. What is not sent
        stays queued or spooled (the recorder keeps sending it); the recorder stays open for other
        sessions."""
        if self.record is None:
            return True
        try:
            return bool(self.record.flush(timeout))
        except Exception:  # noqa: BLE001 - recording never breaks the agent
            return False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def astep(self, messages: Any, **kwargs: Any) -> Step:
        """`step` for async agents: the assembly (and, remote, the HTTP wait) runs in a worker
        thread, so the event loop is not blocked meanwhile. Steps are numbered in call order."""
        import asyncio

        return await asyncio.to_thread(self.step, messages, **kwargs)

    def _local(self, request: dict[str, Any], fmt: str) -> Step:
        from .. import telemetry
        from ..engine import assemble, parse_request
        from ..engine.errors import InvalidInput

        started_ns = time.perf_counter_ns()
        try:
            result = assemble(parse_request(request), self.policy, artifacts=self._artifacts)  # type: ignore[arg-type]
        except InvalidInput as exc:
            raise SDKError("; ".join(exc.errors)) from None
        step = Step(manifest=result.manifest, payload=result.serialized_input, fmt=fmt)
        if self.record is not None:
            self._record(request, result.manifest)
        # With the OTel variables set, the same spans as the service's (ctxeng.telemetry).
        step._traceparent = telemetry.record_local_assembly(result=result, started_ns=started_ns,
                                                            ended_ns=time.perf_counter_ns())
        return step

    def _record(self, request: dict[str, Any], manifest: Any) -> None:
        """Hand the step to the recorder; whatever goes wrong there, the step goes on."""
        try:
            self.record.record(request, manifest)
        except Exception:  # noqa: BLE001 - recording never breaks the agent's step
            if not self._record_failed:
                self._record_failed = True
                warnings.warn("ctxeng: recording this session's steps failed; the steps go on unrecorded", stacklevel=4)

    def _remote(self, request: dict[str, Any], fmt: str) -> Step:
        from ..client import InvalidRequest

        client = self._client
        assert client is not None
        try:
            assembly = client.assemble(request, wait=True, timeout=self._timeout, idempotency_key=f"{self.run_id}/{request['step_id']}")
        except InvalidRequest as exc:
            raise SDKError("; ".join(exc.errors)) from None
        html = assembly.job.get("html_url")
        url = html if not html or html.startswith("http") else client.base_url + html
        assembly_id = assembly.id

        def report(usage: dict[str, int]) -> dict[str, Any]:
            return client.report_usage(assembly_id, **usage)

        return Step(manifest=assembly.manifest or {}, payload=assembly.input, fmt=fmt, job_id=assembly_id, dashboard_url=url,
                    reporter=report)


def _artifact_store(artifacts: Any):
    if artifacts is None or callable(artifacts):
        return artifacts
    if isinstance(artifacts, (str, Path)):
        from ..cli import _Invalid, load_artifacts

        try:
            return load_artifacts(str(artifacts))[0]
        except _Invalid as exc:
            raise SDKError("artifacts: " + "; ".join(exc.errors)) from None
    raise SDKError("artifacts: expected a lookup(artifact_id, revision) or a directory")
