"""Recording on real components: a local session's sdk.Recorder sends to a live server, a real Celery
worker on real Redis verifies (a plain loop, a LangChain agent, the README's snippet, a tampered
manifest); the refusal, the spool's bound and an outage of the service need no worker (their steps
are verified in the server's process).

The outage: the recorder talks to the server through a TCP relay this test stops (connections are
refused, as by a stopped service) and starts again on the same port. No duration is asserted; each
wait ends at its event, with a generous deadline."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ctxeng import sdk, starters
from tests.service_fixtures import TENANT

pytestmark = pytest.mark.slow

GENEROUS = 300.0
PRINCIPAL = {"id": "agent", "tenant": TENANT, "project": "p"}
HISTORY = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
STALE = "page-stale"


@pytest.fixture(autouse=True)
def closed_recorders(monkeypatch):
    """Every recorder a test opens is closed after it, passed or failed (no thread outlives the test)."""
    opened: list[sdk.Recorder] = []
    init = sdk.Recorder.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(sdk.Recorder, "__init__", tracked)
    yield
    for recorder in opened:
        recorder.close(timeout=0)


@pytest.fixture
def chat_policy(transactional_db, editor_user):
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    return policy_import(tenant=Tenant.objects.get(slug=TENANT), text=starters.text("chat-agent"), user=editor_user,
                         publish=True)


def token_of(user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=user)[0].key


def loop(session: sdk.Session, steps: int, start: int = 0) -> None:
    """A plain agent loop: one step per model call, each with a page the policy excludes (expired)."""
    history = list(HISTORY) + [m for n in range(start) for m in (
        {"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"more {n}"})]
    for n in range(start, start + steps):
        page = sdk.web("https://example.com/old", "an old page", freshness="expired", item_id=STALE)
        session.step(history, items=[page])
        history += [{"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"more {n}"}]


def verifications(run_id: str, count: int) -> dict[str, tuple[str, str]]:
    """step_id -> (verification, detail) once the run has `count` recorded steps none pending."""
    from manifests.models import AssemblyJob

    deadline = time.monotonic() + GENEROUS
    while True:
        rows = list(AssemblyJob.objects.filter(run__run_id=run_id).values_list("step_id", "verification",
                                                                               "verification_detail"))
        if len(rows) >= count and all(v != "pending" for _, v, _ in rows):
            return {step: (v, detail) for step, v, detail in rows}
        assert time.monotonic() < deadline, f"run {run_id}: {rows}"
        time.sleep(0.25)


def test_a_plain_local_loop_records_every_step_and_a_worker_verifies_the_run(live_server, start_worker, chat_policy,
                                                                              agent_user):
    worker = start_worker()
    recorder = sdk.Recorder(live_server.url, token_of(agent_user))
    with sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-live", record=recorder) as session:
        loop(session, 4)
    assert recorder.status == {"pending": 0, "sent": 4, "dropped": 0, "spooled": 0, "refused": 0}, list(recorder.errors)
    found = verifications("run-live", 4)
    assert sorted(found) == ["step-1", "step-2", "step-3", "step-4"]
    assert {v for v, _ in found.values()} == {"verified"}, (found, worker.log()[-3000:])
    for n, step in enumerate(session.steps, start=1):  # each names the hash the agent's step had
        assert step.manifest["assembly"]["serialized_model_input_hash"] in found[f"step-{n}"][1]
    recorder.close()


def fake_chat_model(script: list) -> object:
    """langchain-core's GenericFakeChatModel playing `script` (one AI message per model call); the
    class refuses `bind_tools`, which `create_agent` calls, so tools are bound as a provider would."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.utils.function_calling import convert_to_openai_tool

    class ToolCallingFakeChatModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    return ToolCallingFakeChatModel(messages=iter(script))


def test_a_local_langchain_agent_records_every_step_and_a_worker_verifies_the_run(live_server, start_worker,
                                                                                   chat_policy, agent_user):
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from ctxeng.sdk.langchain import ContextMiddleware

    @tool
    def search(query: str) -> str:
        """Search the release notes."""
        return f"Release 2.1 ({query}): the exporter retries failed uploads."

    model = fake_chat_model([
        AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "2.1"}, "id": "call-1"}]),
        AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "2.1 exporter"}, "id": "call-2"}]),
        AIMessage(content="The 2.1 exporter retries failed uploads."),
    ])
    worker = start_worker()
    recorder = sdk.Recorder(live_server.url, token_of(agent_user))
    with sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-langchain", record=recorder) as session:
        agent = create_agent(model, [search], system_prompt="You answer questions about releases.",
                             middleware=[ContextMiddleware(session)])
        result = agent.invoke({"messages": [{"role": "user", "content": "What changed in 2.1?"}]})
    assert result["messages"][-1].content == "The 2.1 exporter retries failed uploads."
    assert len(session.steps) == 3  # one step per model call
    assert recorder.status == {"pending": 0, "sent": 3, "dropped": 0, "spooled": 0, "refused": 0}, list(recorder.errors)
    found = verifications("run-langchain", 3)
    assert sorted(found) == ["step-1", "step-2", "step-3"]
    assert {v for v, _ in found.values()} == {"verified"}, (found, worker.log()[-3000:])
    for n, step in enumerate(session.steps, start=1):
        assert step.manifest["assembly"]["serialized_model_input_hash"] in found[f"step-{n}"][1]
    recorder.close()


SNIPPET = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "recording.py"


def test_the_readme_recording_snippet_runs_as_written(live_server, start_worker, agent_user, editor_user, monkeypatch):
    """The README's snippet (docs/snippets/recording.py) against the live server, in a tenant `acme`
    where the token's user is an agent and the starter is published."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from ctxeng.accounts.models import Tenant
    from ctxeng.accounts.services import tenant_member_add
    from policies.services import policy_import

    tenant_member_add(username=agent_user.username, tenant_slug="acme", roles=["agent", "reviewer"])
    tenant_member_add(username=editor_user.username, tenant_slug="acme", roles=["policy_editor"])
    policy_import(tenant=Tenant.objects.get(slug="acme"), text=starters.text("chat-agent"), user=editor_user, publish=True)
    monkeypatch.setenv("CTXENG_URL", live_server.url)
    monkeypatch.setenv("CTXENG_TOKEN", token_of(agent_user))

    @tool
    def search(query: str) -> str:
        """Search the release notes."""
        return "Release 2.1: the exporter retries failed uploads."

    model = fake_chat_model([
        AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "2.1"}, "id": "call-1"}]),
        AIMessage(content="The exporter retries failed uploads."),
    ])
    worker = start_worker()
    text = SNIPPET.read_text().split("# --- README ---\n")[1].split("# --- end README ---")[0]
    namespace = {"model": model, "tools": [search], "__name__": "readme_snippet"}
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(text, str(SNIPPET), "exec"), namespace)
    session = namespace["session"]
    assert namespace["result"]["messages"][-1].content == "The exporter retries failed uploads."
    status = {"pending": 0, "sent": 2, "dropped": 0, "spooled": 0, "refused": 0}
    assert session.record.status == status, list(session.record.errors)
    assert out.getvalue().strip() == repr(status)
    found = verifications(session.run_id, 2)
    assert {v for v, _ in found.values()} == {"verified"}, (found, worker.log()[-3000:])
    session.record.close()


class Tampering(sdk.Recorder):
    """Turns the exclusion of STALE into an inclusion on the way (a copy of an included record)."""

    def record(self, request, manifest):
        document = manifest.model_dump(mode="json")
        [excluded] = [e for e in document["excluded"] if e["item_id"] == STALE]
        document["excluded"].remove(excluded)
        forged = {**document["included"][-1], "item_id": STALE, "kind": excluded["kind"],
                  "source_type": excluded["source_type"], "source_ref": excluded["source_ref"]}
        document["included"].append(forged)
        super().record(request, document)


def test_a_manifest_tampered_on_the_way_is_diverged_naming_the_item(live_server, start_worker, chat_policy, agent_user):
    worker = start_worker()
    recorder = Tampering(live_server.url, token_of(agent_user))
    with sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-forged", record=recorder) as session:
        loop(session, 1)
    (verification, detail), = verifications("run-forged", 1).values()
    assert verification == "diverged", worker.log()[-3000:]
    assert detail.startswith(f"item {STALE}: recorded included (") and detail.endswith("re-assembled excluded (expired)")
    recorder.close()


def test_long_contents_sent_by_reference_are_put_back_and_every_step_verified(live_server, inline_jobs, chat_policy,
                                                                              agent_user, api):
    from manifests.models import AssemblyJob

    long = "The release notes of 2.1, as the tool returned them. " * 8
    recorder = sdk.Recorder(live_server.url, token_of(agent_user))
    sent, send = [], recorder._client.record_steps
    recorder._client.record_steps = lambda body: sent.append(json.loads(body)) or send(body)  # what went on the wire
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-by-ref", record=recorder)
    history = [*HISTORY, {"role": "assistant", "content": long}]
    requests = []
    for n in range(3):  # each step acknowledged before the next: steps 2 and 3 name `long` by reference
        history.append({"role": "user", "content": f"and {n}?"})
        requests.append(session.request(history)[0])
        session.step(history)
        assert session.close(timeout=GENEROUS), list(recorder.errors)
        history.append({"role": "assistant", "content": f"reply {n}"})
    assert recorder.status == {"pending": 0, "sent": 3, "dropped": 0, "spooled": 0, "refused": 0}
    referenced = [[c.get("content_ref") for c in step["request"]["candidates"] if "content_ref" in c]
                  for body in sent for step in body["steps"]]
    digest = requests[0]["candidates"][2]["content_hash"]
    assert requests[0]["candidates"][2]["content"] == long and referenced == [[], [digest], [digest]]
    assert {v for v, _ in verifications("run-by-ref", 3).values()} == {"verified"}
    client = api(agent_user)
    for n, request in enumerate(requests, start=1):
        job = AssemblyJob.objects.get(run__run_id="run-by-ref", step_id=f"step-{n}")
        assert client.get(f"/api/v1/assemblies/{job.id}/request/").json() == request  # as the agent assembled it
    recorder.close()


def test_a_token_of_another_tenant_is_refused(live_server, inline_jobs, chat_policy, outsider_user):
    from manifests.models import AssemblyJob

    recorder = sdk.Recorder(live_server.url, token_of(outsider_user))
    with sdk.Session("chat-agent", principal=PRINCIPAL, record=recorder) as session:
        loop(session, 2)
    assert recorder.status == {"pending": 0, "sent": 0, "dropped": 0, "spooled": 0, "refused": 2}
    assert all("not a member of tenant 'tenant-x'" in error for error in recorder.errors)
    assert not AssemblyJob.objects.exists()
    recorder.close()


def test_the_spools_bound_holds_and_the_run_shows_what_was_dropped(live_server, inline_jobs, chat_policy, agent_user,
                                                                  client, tmp_path):
    from manifests.models import AssemblyJob, Run

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{sock.getsockname()[1]}"
    first = sdk.Recorder(nowhere, token_of(agent_user), spool_dir=tmp_path, max_queue=2, max_spool=3)
    loop(sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-lossy", record=first), 7)
    assert first.close(timeout=0)["spooled"] == len(list(tmp_path.glob("*.step"))) == 3

    second = sdk.Recorder(live_server.url, token_of(agent_user), spool_dir=tmp_path)
    assert second.flush(timeout=GENEROUS), list(second.errors)
    assert second.status == {"pending": 0, "sent": 3, "dropped": 4, "spooled": 0, "refused": 0}
    assert sorted(AssemblyJob.objects.filter(run__run_id="run-lossy").values_list("step_id", flat=True)) == [
        "step-5", "step-6", "step-7"]
    assert Run.objects.get(run_id="run-lossy").recorded_dropped == 4
    client.force_login(agent_user)
    assert '<span class="badge bad dropped">4 dropped</span>' in client.get("/runs/run-lossy/").content.decode()
    second.close()


class Relay:
    """A TCP relay to `target` on a port of its own, which `stop()` closes (connections refused,
    as by a stopped service) and `start()` opens again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.listener: socket.socket | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would not, on Linux)
            listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_the_service_stopped_mid_run_and_started_again_loses_no_step_and_stores_none_twice(
    live_server, inline_jobs, chat_policy, agent_user, tmp_path
):
    from manifests.models import AssemblyJob

    host, port = live_server.thread.host, live_server.thread.port
    relay = Relay((host, port))
    recorder = sdk.Recorder(relay.url, token_of(agent_user), spool_dir=tmp_path, retry_base=0.1, retry_cap=1.0)
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-outage", record=recorder)
    loop(session, 3)
    assert session.close(timeout=GENEROUS)
    relay.stop()
    loop(session, 3, start=3)  # the service is down: the steps go on and wait in the spool
    assert session.close(timeout=1) is False and recorder.status["pending"] == 3
    relay.start()
    assert session.close(timeout=GENEROUS), list(recorder.errors)
    assert recorder.status == {"pending": 0, "sent": 6, "dropped": 0, "spooled": 0, "refused": 0}
    steps = list(AssemblyJob.objects.filter(run__run_id="run-outage").values_list("step_id", flat=True))
    assert sorted(steps) == [f"step-{n}" for n in range(1, 7)]  # none lost, none twice
    recorder.close()
    relay.stop()
