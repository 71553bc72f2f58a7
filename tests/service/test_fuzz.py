"""hypothesis over the request and policy models, through the API, with the jobs run (issue 12).

Each example starts from the worked example (a request that assembles, a policy that publishes)
and mutates it: a few fields, anywhere in the document, get values chosen to reach the edges
(strings at and past the column limits, integers past 2^31 and 2^53, NaN and Infinity, nesting
past the depth limit, NUL, vocabulary words in the wrong place, wrong types), keys are dropped or
added, candidates are copied or removed. The body is sent as JSON text (so NaN and Infinity
reach the server as written). Whatever happens, the API answers 2xx or 4xx, never 5xx; and a
request it accepts (202) runs in-process to `ready` or `blocked`, never `failed`: anything that
could fail later must be a 400 now. A policy it accepts is published and assembled against.

Derandomized, with a bounded number of examples, so CI is deterministic and the file takes well
under a minute; every failure found once is kept as an `@example`.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxeng.engine import vocabulary
from ctxeng.engine.limits import MAX_ID, MAX_INT32, MAX_ITEM_ID, MAX_JSON_DEPTH, MAX_JSON_INTEGER, MAX_NAME

REQUEST_EXAMPLES = 120
POLICY_EXAMPLES = 60
URL = "/api/v1/assemblies/"

# --------------------------------------------------------------------------- values


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


class Raw:
    """A JSON token written as is (NaN, Infinity, a 5,000-digit integer): json.dumps cannot."""

    def __init__(self, token: str) -> None:
        self.token = token


WORDS = sorted({m.value for enum in vars(vocabulary).values() if isinstance(enum, type) and hasattr(enum, "__members__")
                for m in enum})  # type: ignore[attr-defined]
SIZES = sorted({0, 1, MAX_NAME, MAX_NAME + 1, MAX_ID, MAX_ID + 1, MAX_ITEM_ID, MAX_ITEM_ID + 1, 400})
NUMBERS = [0, 1, -1, MAX_INT32, MAX_INT32 + 1, MAX_JSON_INTEGER, MAX_JSON_INTEGER + 1, -(2**63), 2**40]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(SIZES).map(lambda n: "x" * n),
    st.sampled_from(WORDS),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000]).map(Raw),
    st.integers(min_value=MAX_JSON_DEPTH - 8, max_value=MAX_JSON_DEPTH + 8).map(_nested),
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


strings = st.one_of(st.text(max_size=12), st.sampled_from(SIZES).map(lambda n: "x" * n), st.sampled_from(WORDS))


def _like(original: Any) -> st.SearchStrategy:
    """Values of the original's JSON type, so a mutation often stays valid and reaches the engine."""
    if isinstance(original, bool):
        return st.booleans()
    if isinstance(original, int):
        return st.sampled_from(NUMBERS) | st.integers(min_value=-10, max_value=10**6)
    if isinstance(original, float):
        return st.floats(min_value=0.0, max_value=1.0) | st.sampled_from(["NaN", "1e999"]).map(Raw)
    if isinstance(original, str):
        return strings
    if isinstance(original, list):
        return st.lists(_like(original[0]) if original else strings, max_size=4)
    return values


def _dumps(value: Any) -> bytes:
    """JSON text, Raw tokens in place (a placeholder string is swapped for each token)."""
    tokens: list[str] = []

    def default(obj: Any) -> str:
        tokens.append(obj.token)
        return f"\u2063raw{len(tokens) - 1}\u2063"

    text = json.dumps(value, default=default)
    for index, token in enumerate(tokens):
        text = text.replace(f'"\u2063raw{index}\u2063"', token)
    return text.encode()


# --------------------------------------------------------------------------- mutations


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key and index path in a JSON document (the document itself excluded)."""
    found = []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return found
    for key, child in items:
        found.append((*prefix, key))
        found.extend(_paths(child, (*prefix, key)))
    return found


def _parent(document: Any, path: tuple) -> Any:
    for key in path[:-1]:
        document = document[key]
    return document


@st.composite
def mutated(draw, original: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(original)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(document, path)
        action = draw(st.sampled_from(["set", "set", "set", "drop", "add", "copy"]))
        if action == "set":
            parent[path[-1]] = draw(_like(parent[path[-1]]) if draw(st.integers(0, 4)) else values)
        elif action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "item_id", "kind", "revision", "source_ref"]))] = draw(values)
        elif action == "copy" and isinstance(parent, list):
            twin = copy.deepcopy(parent[path[-1]])
            if isinstance(twin, dict) and "item_id" in twin:
                twin["item_id"] = draw(st.sampled_from(["copy", "x" * MAX_ITEM_ID, "x" * (MAX_ITEM_ID + 1)]))
            parent.append(twin)
    return document


# --------------------------------------------------------------------------- the properties


def _post(client, url: str, document: Any, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(url, data=_dumps(document), content_type="application/json", **headers)


@pytest.fixture
def fuzz_env(settings, published_policy, inline_jobs):
    settings.CTXENG_THROTTLE_AGENT = ""


def _assert_accepted_jobs_finish(client, response) -> None:
    assert response.status_code < 500, response.content[:2000]
    if response.status_code == 202:
        job = client.get(response.json()["url"]).json()
        assert job["status"] in ("ready", "blocked"), job


def test_no_request_body_gets_a_5xx_or_an_accepted_job_that_fails(
    fuzz_env, agent_api, example_request, django_capture_on_commit_callbacks
):
    steps = itertools.count()

    @given(document=mutated(example_request))
    @example(document={**example_request, "run_id": "r" * (MAX_ID + 1)})
    @example(document={**example_request, "policy": {"id": "source-research", "revision": MAX_INT32 + 1}})
    @settings(max_examples=REQUEST_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(document: dict[str, Any]) -> None:
        document = copy.deepcopy(document)  # explicit examples share parts with the fixture
        if isinstance(document, dict) and isinstance(document.get("step_id"), str):
            document["step_id"] = f"{document['step_id'][:150]}-{next(steps)}"  # a new job, not a replay
        with django_capture_on_commit_callbacks(execute=True):
            response = _post(agent_api, URL, document)
        _assert_accepted_jobs_finish(agent_api, response)

    check()


def test_no_policy_body_gets_a_5xx_and_a_published_one_assembles_without_failing(
    fuzz_env, editor_api, agent_api, example_policy_body, example_request, django_capture_on_commit_callbacks
):
    numbers = itertools.count(100)

    @given(document=mutated(example_policy_body))
    @example(document={**example_policy_body, "budget": {**example_policy_body["budget"], "partitions": {
        "p" * MAX_NAME: example_policy_body["budget"]["partitions"]["control"],
        **{k: v for k, v in example_policy_body["budget"]["partitions"].items() if k != "control"}}}})
    # Found by this test: a list inside `transforms.allowed` reached a set in the engine's
    # duplicate check (TypeError, 500) before the type check could name it.
    @example(document={**example_policy_body, "transforms": {**example_policy_body["transforms"],
                                                             "allowed": ["none", []]}})
    @settings(max_examples=POLICY_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(document: dict[str, Any]) -> None:
        document = copy.deepcopy(document)  # explicit examples share parts with the fixture
        number = next(numbers)
        header = document.get("policy") if isinstance(document, dict) else None
        if isinstance(header, dict) and header.get("revision") == 3:
            header["revision"] = number  # a new draft; other values are the fuzzer's
        response = _post(editor_api, "/api/v1/policies/source-research/revisions/", {"body": document})
        assert response.status_code < 500, response.content[:2000]
        if response.status_code != 201:
            return
        revision = response.json()["revision"]
        published = _post(editor_api, f"/api/v1/policies/source-research/revisions/{revision}/publish/", {})
        assert published.status_code < 500, published.content[:2000]
        if published.status_code != 200:
            return
        request = {**example_request, "policy": {"id": "source-research", "revision": revision},
                   "step_id": f"policy-{revision}"}
        with django_capture_on_commit_callbacks(execute=True):
            response = _post(agent_api, URL, request)
        _assert_accepted_jobs_finish(agent_api, response)

    check()
