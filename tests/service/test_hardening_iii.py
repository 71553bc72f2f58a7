"""Hardening III (issue 30): what the attack on the production layout found, each refused at the
edge with a 4xx that names the field or parameter, never a 500 and never a job accepted that fails
later.

1. a lone surrogate (`"\\ud800"` as a JSON escape) in any string of any body: 400 naming its path;
2. a model too small for the policy's reserves, and a boolean where an integer belongs: 400 at
   submit (the manifest row could not hold the usable input the job would reach);
3. `?from=²`: 400 naming the parameter (API and dashboard);
4. `?limit=` / `?offset=` beyond what the database evaluates: 400 naming the parameter;
8. an id holding a control, format or line-separator character: 400 at submit; every id the rule
   admits can be viewed, filtered and closed;
12. a chunked body over the limit: 413; a key named twice: 400 naming it; a charset other than
    UTF-8: 415; two calls completing at the same place: 400 naming `completed_seq`.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pydantic import BaseModel

from ctxeng.engine.hashing import sha256_text

URL = "/api/v1/assemblies/"
REPO = Path(__file__).resolve().parents[2]
LONE = "\ud800"


def post_json(client, url: str, body: Any, **headers: str):
    """POST `body` as JSON text with non-ASCII escaped (`\\ud800` stays an escape, as a client
    written in any language would send it)."""
    return client.post(url, data=json.dumps(body).encode(), content_type="application/json", **headers)


def submit_raw(submit_client, body: Any):
    return post_json(submit_client, URL, body)


def errors(response) -> list[str]:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.json()["errors"]


def jobs() -> int:
    from manifests.models import AssemblyJob

    return AssemblyJob.objects.count()


def candidate(body: dict[str, Any], item_id: str, content: str, **fields: Any) -> dict[str, Any]:
    """A copy of an ordinary evidence candidate of the worked example, with its own id and content."""
    item = copy.deepcopy(body["candidates"][12])
    item.update(item_id=item_id, content=content, content_hash=sha256_text(content), **fields)
    return item


# --------------------------------------------------------------------------- 1. lone surrogates


def _content(body):
    body["candidates"][12]["content"] = f"text {LONE} text"
    return "candidates[12].content"


def _source_ref_key(body):
    body["candidates"][12]["source_ref"][f"k{LONE}"] = "v"
    return "candidates[12].source_ref.k\\ud800"


def _source_ref_value(body):
    body["candidates"][12]["source_ref"]["path"] = f"a{LONE}"
    return "candidates[12].source_ref.path"


def _argument(body):
    body["tool_calls"][0]["arguments"]["q"] = LONE
    return "tool_calls[0].arguments.q"


def _argument_key(body):
    body["tool_calls"][0]["arguments"]["\udc00"] = 1
    return "tool_calls[0].arguments.\\udc00"


@pytest.mark.parametrize("mutate", [_content, _source_ref_key, _source_ref_value, _argument, _argument_key])
def test_a_lone_surrogate_in_an_assembly_request_is_a_400_naming_its_path(
        mutate, agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    path = mutate(body)
    response = submit_raw(agent_api, body)
    assert response.status_code == 400
    [message] = errors(response)
    assert message.startswith(f"{path}: ") and "lone surrogate" in message, message
    assert jobs() == 0


def test_a_lone_surrogate_in_an_artifact_a_policy_or_a_publish_note_is_a_400_naming_its_path(
        agent_api, editor_api, published_policy, example_policy_body):
    artifact = {"artifact_id": "notes", "revision": 1, "kind": "evidence", "content": f"x{LONE}", "writer": "agent",
                "scope": "tenant-x/project-y"}
    response = post_json(agent_api, "/api/v1/artifacts/", artifact)
    assert response.status_code == 400 and errors(response)[0].startswith("content: contains a lone surrogate")

    policy = copy.deepcopy(example_policy_body)
    policy["policy"]["revision"] = 4
    policy["policy"].pop("digest", None)
    policy["serialization"]["policy_version"] = f"v{LONE}"
    response = post_json(editor_api, "/api/v1/policies/source-research/revisions/", {"body": policy})
    assert response.status_code == 400
    assert errors(response)[0].startswith("body.serialization.policy_version: contains a lone surrogate")

    response = post_json(editor_api, "/api/v1/policies/source-research/revisions/3/publish/", {"note": f"n{LONE}"})
    assert response.status_code == 400 and errors(response)[0].startswith("note: contains a lone surrogate")


def test_a_lone_surrogate_escaped_in_a_yaml_policy_is_refused_naming_its_line(editor_user, example_policy_text):
    from ctxeng.accounts.models import Tenant
    from ctxeng.engine import InvalidInput
    from policies.services import policy_import

    text = example_policy_text.replace("revision: 3", "revision: 5", 1) + 'x_note: "a\\ud800"\n'
    line = text.count("\n")
    with pytest.raises(InvalidInput) as refused:
        policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=text, user=editor_user, publish=False)
    assert refused.value.errors == [
        f"body: line {line}: a value contains a lone surrogate (\\ud800), which is no Unicode character; "
        "send text that UTF-8 can encode"]


# --------------------------------------------------------------------------- 2. limits known at submit


@pytest.mark.parametrize("context_limit", [1, 2999])
def test_a_model_smaller_than_the_policys_reserves_is_a_400_at_submit(
        context_limit, agent_api, published_policy, submit, example_request):
    # The worked example's policy reserves 2000 + 500 + 500 tokens (response, protocol, margin).
    body = copy.deepcopy(example_request)
    body["model"]["context_limit"] = context_limit
    response = submit(agent_api, body)
    assert response.status_code == 400
    [message] = errors(response)
    assert message.startswith(f"model.context_limit: {context_limit} leaves no input under policy source-research/3")
    assert "reserve 3000 tokens" in message
    assert jobs() == 0


def test_a_model_exactly_the_size_of_the_reserves_is_accepted_and_blocked_with_its_manifest(
        agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    body["model"]["context_limit"] = 3000
    response = submit(agent_api, body)
    assert response.status_code == 202
    job = agent_api.get(f"{URL}{response.json()['id']}/?include=manifest").json()
    assert job["status"] == "blocked" and job["error"] is None
    assert job["manifest"]["assembly"]["blocked_reason"] == "required_partition_missing"
    assert job["manifest"]["assembly"]["blocked_detail"][0].startswith("budget_exhausted: ")
    assert job["manifest"]["budget"]["usable_input"] == 0


def test_a_context_limit_beyond_an_integer_column_is_a_400(agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    body["model"]["context_limit"] = 2**31
    response = submit(agent_api, body)
    assert response.status_code == 400
    assert errors(response) == ["model.context_limit: Input should be less than or equal to 2147483647"]


BOOLEAN_CASES = {
    "model.context_limit": lambda body: body["model"].update(context_limit=True),
    "policy.revision": lambda body: body["policy"].update(revision=True),
    "tool_calls[0].completed_seq": lambda body: body["tool_calls"][0].update(completed_seq=True),
    "candidates[12].relevance": lambda body: body["candidates"][12].update(relevance=True),
    "candidates[12].estimated_tokens": lambda body: body["candidates"][12].update(estimated_tokens=False),
}


@pytest.mark.parametrize("path", BOOLEAN_CASES)
def test_a_boolean_where_a_request_gives_a_number_is_a_400_naming_it(
        path, agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    BOOLEAN_CASES[path](body)
    response = submit(agent_api, body)
    assert response.status_code == 400
    assert any(e.startswith(f"{path}: Input should be a valid") for e in errors(response)), errors(response)
    assert jobs() == 0


def test_a_boolean_where_a_policy_gives_a_number_is_a_400_naming_it(editor_api, published_policy, example_policy_body):
    for mutate, path in [
        (lambda b: b["policy"].update(revision=True), "body.policy.revision"),
        (lambda b: b["admission"].update(min_relevance=True), "body.admission.min_relevance"),
        (lambda b: b["budget"].update(calibration={"min_reports": True}), "body.budget.calibration.min_reports"),
    ]:
        policy = copy.deepcopy(example_policy_body)
        policy["policy"]["revision"] = 4
        policy["policy"].pop("digest", None)
        mutate(policy)
        response = editor_api.post("/api/v1/policies/validate/", policy, format="json")
        assert response.status_code == 400, (path, response.content)
        assert any(e.startswith(f"{path.removeprefix('body.')}: Input should be a valid") for e in errors(response)), (
            path, errors(response))


def _number_schemas(schema: Any, found: list[dict[str, Any]]) -> None:
    """Every int and float core schema under `schema` (pydantic's core schema, walked as data)."""
    if isinstance(schema, dict):
        if schema.get("type") in ("int", "float"):
            found.append(schema)
        for value in schema.values():
            _number_schemas(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _number_schemas(value, found)


def _request_models() -> list[type[BaseModel]]:
    from ctxeng.engine import AssemblyRequest, ContextPolicy
    from manifests.api import ArtifactBody, RunCloseBody, UsageBody
    from policies.api import PublishBody, RevisionBody

    return [AssemblyRequest, ContextPolicy, ArtifactBody, UsageBody, RunCloseBody, RevisionBody, PublishBody]


def test_no_request_or_policy_model_reads_a_boolean_as_a_number():
    """Every integer and number a body can give is strict: pydantic's lax mode reads `true` as 1."""
    checked, lax = 0, []
    for model in _request_models():
        found: list[dict[str, Any]] = []
        _number_schemas(model.__pydantic_core_schema__, found)
        checked += len(found)
        lax += [(model.__name__, s) for s in found if not (s.get("strict") or model.model_config.get("strict"))]
    assert checked > 20 and not lax, lax


# --------------------------------------------------------------------------- 3. and 4. integer query parameters


@pytest.mark.parametrize("value", ["²", "٣", "99999999999999999999999", "-1", "0", "1.0", "true", " 3"])
def test_a_policy_diff_revision_that_is_no_revision_number_is_a_400_naming_it(
        value, editor_api, published_policy):
    response = editor_api.get(f"/api/v1/policies/source-research/diff/?from={quote(value)}&to=3")
    assert response.status_code == 400
    assert errors(response) == [f"from: expected a whole number from 1 to 2147483647, got {value!r}"]


@pytest.mark.parametrize("value", ["²", "99999999999999999999999"])
def test_the_dashboards_policy_diff_answers_a_bad_revision_with_its_400_page(value, client, editor_user, published_policy):
    client.force_login(editor_user)
    response = client.get(f"/policies/source-research/diff/?from={quote(value)}")
    assert response.status_code == 400
    assert "from: expected a whole number from 1 to 2147483647" in response.content.decode()


LISTS = ["/api/v1/assemblies/", "/api/v1/artifacts/", "/api/v1/items/task-goal/decisions/"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(("query", "named"), [
    ("limit=999999999999999999999", "limit: expected a whole number from 1 to 1000"),
    ("limit=1001", "limit: expected a whole number from 1 to 1000"),
    ("limit=0", "limit: expected a whole number from 1 to 1000"),
    ("limit=%C2%B2", "limit: expected a whole number from 1 to 1000"),
    ("limit=true", "limit: expected a whole number from 1 to 1000"),
    ("offset=999999999999999999999", "offset: expected a whole number from 0 to 2147483647"),
    ("offset=-1", "offset: expected a whole number from 0 to 2147483647"),
])
def test_a_page_parameter_out_of_bounds_is_a_400_naming_it(url, query, named, agent_api, published_policy):
    response = agent_api.get(f"{url}?{query}")
    assert response.status_code == 400
    [message] = errors(response)
    assert message.startswith(named + ", got "), message


def test_a_page_within_bounds_is_served(agent_api, published_policy, submit, example_request, example_blocked_request):
    assert submit(agent_api, example_request).status_code == 202
    assert submit(agent_api, example_blocked_request).status_code == 202
    page = agent_api.get(f"{URL}?limit=1&offset=1").json()
    assert page["count"] == 2 and len(page["results"]) == 1
    assert agent_api.get(f"{URL}?limit=1000&offset=2147483647").json()["results"] == []


# --------------------------------------------------------------------------- 8. one rule for ids

UNPRINTABLE = {"U+0001": "\u0001", "U+001B": "\u001b", "U+007F": "\u007f", "U+0085": "\u0085", "U+2028": "\u2028",
               "U+FEFF": "\ufeff"}


def _id_cases() -> list[tuple[str, Any]]:
    def at(path: str):
        def mutate(body, char):
            if path == "run_id":
                body["run_id"] = f"h2-ctl-{char}run"
            elif path == "step_id":
                body["step_id"] = f"s{char}"
            elif path == "candidates[12].item_id":
                body["candidates"][12]["item_id"] = f"i{char}"
            elif path == "tool_calls[0].call_id":
                call = body["tool_calls"][0]
                result = next(c for c in body["candidates"] if c["item_id"] == call["result_item_id"])
                call["call_id"] = result["call_id"] = f"c{char}"
            elif path == "principal.id":
                body["principal"]["id"] = f"p{char}"
        return mutate

    return [(p, at(p)) for p in ("run_id", "step_id", "candidates[12].item_id", "tool_calls[0].call_id", "principal.id")]


@pytest.mark.parametrize("code", UNPRINTABLE)
@pytest.mark.parametrize(("path", "mutate"), _id_cases(), ids=[p for p, _ in _id_cases()])
def test_an_id_holding_an_unprintable_character_is_a_400_at_submit(
        code, path, mutate, agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    mutate(body, UNPRINTABLE[code])
    response = submit(agent_api, body)
    assert response.status_code == 400
    assert any(e.startswith(f"{path}: contains {code}") for e in errors(response)), errors(response)
    assert jobs() == 0


def test_an_artifact_id_holding_an_unprintable_character_is_a_400(agent_api, published_policy):
    artifact = {"artifact_id": "notes\u2028", "revision": 1, "kind": "evidence", "content": "x", "writer": "agent",
                "scope": "tenant-x/project-y"}
    response = agent_api.post("/api/v1/artifacts/", artifact, format="json")
    assert response.status_code == 400 and errors(response)[0].startswith("artifact_id: contains U+2028")


def test_a_policy_id_holding_a_slash_is_a_400_since_its_urls_take_one_segment(
        agent_api, editor_api, published_policy, submit, example_request, example_policy_body):
    policy = copy.deepcopy(example_policy_body)
    policy["policy"]["id"] = "team/research"
    response = editor_api.post("/api/v1/policies/validate/", policy, format="json")
    assert response.status_code == 400 and errors(response)[0].startswith("policy.id: contains '/'")
    body = copy.deepcopy(example_request)
    body["policy"]["id"] = "team/research"
    response = submit(agent_api, body)
    assert response.status_code == 400 and errors(response)[0].startswith("policy.id: contains '/'")


def test_a_partition_name_holding_a_control_character_is_a_400_naming_it(editor_api, example_policy_body):
    """A partition's name becomes part of the ids the budget derives (its structured summary): a
    name no id could hold was accepted, then failed the job that needed its summary."""
    policy = copy.deepcopy(example_policy_body)
    policy["budget"]["partitions"]["state\x85"] = policy["budget"]["partitions"].pop("state")
    response = editor_api.post("/api/v1/policies/validate/", policy, format="json")
    assert response.status_code == 400
    assert errors(response)[0].startswith("budget.partitions.state\x85: contains U+0085"), errors(response)


# Printable characters that paths, queries and pages each treat specially: a slash, a space, the
# URL delimiters, a percent sign, quotes and brackets, a no-break space, letters beyond ASCII.
EDGE_ID = "edge/ ?#%&+=;~'\"<b>\u00a0é😀/x"


def test_an_id_at_the_edge_of_the_alphabet_can_be_viewed_filtered_and_closed(
        client, reviewer_user, agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    body["run_id"] = EDGE_ID
    body["candidates"].append(candidate(body, f"item {EDGE_ID}", "an edge case of an id"))
    submitted = submit(agent_api, body)
    assert submitted.status_code == 202, submitted.content

    listed = agent_api.get(f"{URL}?run_id={quote(EDGE_ID, safe='')}").json()
    assert [job["run_id"] for job in listed["results"]] == [EDGE_ID]

    decisions = agent_api.get(f"/api/v1/items/{quote('item ' + EDGE_ID, safe='')}/decisions/").json()
    assert [row["run_id"] for row in decisions["results"]] == [EDGE_ID]

    client.force_login(reviewer_user)
    page = client.get(listed["results"][0]["run_html_url"])
    assert page.status_code == 200
    assert "edge/ ?#%&amp;+=;~&#x27;&quot;&lt;b&gt;\u00a0é😀/x" in page.content.decode()

    closed = agent_api.post(f"/api/v1/runs/{quote(EDGE_ID, safe='')}/close/", {}, format="json")
    assert closed.status_code == 200, closed.content
    assert closed.json()["run_id"] == EDGE_ID


# --------------------------------------------------------------------------- 12. bodies


def test_a_key_named_twice_is_a_400_naming_its_path(agent_api, published_policy, submit, example_request):
    text = json.dumps(example_request)
    first = json.dumps(example_request["candidates"][12]["source_ref"])
    doubled = first[:-1] + ', "url": "https://example.org/other"}'
    assert text.count(first) == 1 and '"url"' in first
    response = agent_api.post(URL, data=text.replace(first, doubled, 1).encode(), content_type="application/json")
    assert response.status_code == 400
    assert errors(response) == ["candidates[12].source_ref.url: duplicate key 'url' (a JSON object names each key once)"]
    top = '{"run_id": "a", ' + text[1:]
    assert errors(agent_api.post(URL, data=top.encode(), content_type="application/json")) == [
        "run_id: duplicate key 'run_id' (a JSON object names each key once)"]


@pytest.mark.parametrize("charset", ["latin-1", "iso-8859-1", "utf-16", "UTF-32"])
def test_a_body_declared_in_another_charset_is_a_415(charset, agent_api, published_policy, example_request):
    response = agent_api.post(URL, data=json.dumps(example_request).encode(),
                              content_type=f"application/json; charset={charset}")
    assert response.status_code == 415
    assert errors(response) == [f"Content-Type: charset {charset.lower()!r} is not accepted; send JSON encoded as UTF-8"]


def test_a_body_in_utf16_or_latin1_without_a_charset_is_a_400(agent_api, published_policy, example_request):
    text = json.dumps(example_request, ensure_ascii=False).replace("source research agent", "sourcé research agent")
    for encoded, message in [
        (text.encode("utf-16"), "body: looks like UTF-16 or UTF-32; send JSON encoded as UTF-8"),
        (text.encode("utf-16-le"), "body: looks like UTF-16 or UTF-32; send JSON encoded as UTF-8"),
    ]:
        assert errors(agent_api.post(URL, data=encoded, content_type="application/json")) == [message]
    latin1 = agent_api.post(URL, data=text.encode("latin-1"), content_type="application/json")
    assert latin1.status_code == 400
    assert errors(latin1)[0].startswith("body: not UTF-8 (byte 0xE9 at offset ")
    assert jobs() == 0


def test_two_calls_completing_at_the_same_place_are_a_400_naming_completed_seq(
        agent_api, published_policy, submit, example_request):
    body = copy.deepcopy(example_request)
    body["tool_calls"][1]["completed_seq"] = body["tool_calls"][0]["completed_seq"]
    response = submit(agent_api, body)
    assert response.status_code == 400
    assert errors(response) == [
        f"tool_calls[1].completed_seq: {body['tool_calls'][0]['completed_seq']} is also the completed_seq of "
        "tool_calls[0]; each completed call has its own place"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gunicorn_server(tmp_path):
    """gunicorn serving ctxeng.server.wsgi on a loopback port (the README's production server; its own
    SQLite file: the 413 is answered before any view or query)."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": "x" * 60, "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "DJANGO_SECURE_SSL_REDIRECT": "false"}
    env.pop("REDIS_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "ctxeng.server.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1",
         "--timeout", "120"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                time.sleep(0.2)
        else:
            pytest.fail("gunicorn did not listen within its deadline")
        yield port
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_a_chunked_body_over_the_limit_without_content_length_is_a_413(gunicorn_server):
    connection = http.client.HTTPConnection("127.0.0.1", gunicorn_server, timeout=120)
    connection.putrequest("POST", URL)
    connection.putheader("Transfer-Encoding", "chunked")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Authorization", "Token nobody")
    connection.endheaders()
    chunk = b" " * (1024 * 1024)

    def send() -> None:
        try:
            for _ in range(20):
                connection.sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            connection.sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed: the rest was not needed

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    response = connection.getresponse()
    body = response.read()
    sender.join(timeout=120)
    connection.close()
    assert response.status == 413, body[:500]
    assert json.loads(body) == {"errors": ["body: more than the limit of 16777216 bytes (CTXENG_MAX_REQUEST_BYTES)"]}


def test_a_chunked_body_within_the_limit_is_read_whole(settings, rf):
    """Django reads a body only to its Content-Length: without one, a chunked body was empty."""
    import io

    from ctxeng.server.middleware import ChunkedBodyMiddleware

    seen: dict[str, Any] = {}

    def view(request):
        seen["body"] = request.body
        return None

    request = rf.post("/api/v1/assemblies/", data=b"", content_type="application/json")
    request.META.pop("CONTENT_LENGTH", None)
    request.META["HTTP_TRANSFER_ENCODING"] = "chunked"
    request.META["wsgi.input"] = io.BytesIO(b'{"run_id": "x"}')
    ChunkedBodyMiddleware(view)(request)
    assert seen["body"] == b'{"run_id": "x"}'

