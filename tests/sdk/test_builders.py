"""The builders compute what they can and refuse, naming the argument, what they cannot guess.

Each built item goes through the engine's own request model, so a builder that forgot a field the
source type needs fails here, not in an agent's run."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from ctxeng import sdk
from ctxeng.engine.gates import REQUIRED_SOURCE_REF
from ctxeng.engine.models import ContextItem

COMMIT = "53fa77ccd8a279eb87e92294ef3687b03ff80112"


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


BUILT = {
    "code": lambda: sdk.code("pi", COMMIT, "src/types.ts", (149, 200), "export type X = 1"),
    "web": lambda: sdk.web("https://context7.com/docs", "page", fetched_at=datetime(2026, 11, 30, tzinfo=UTC)),
    "file": lambda: sdk.file("notes/plan.md", "notes", revision=3),
    "memory": lambda: sdk.memory("user prefers metric", memory_id="mem-1"),
    "plan": lambda: sdk.plan("1. read 2. write", plan_id="plan-42", revision=5),
    "summary": lambda: sdk.summary("Found the pairing rule.", inputs=["result-a", "result-b"]),
}


@pytest.mark.parametrize("name", sorted(BUILT))
def test_each_builder_makes_a_candidate_the_engine_accepts_with_its_hash_and_source_ref(name):
    item = BUILT[name]()
    cand = ContextItem.model_validate(item.candidate(scope="t/p/run", producer="me"))
    assert cand.content_hash == sha(cand.content)
    alternatives = REQUIRED_SOURCE_REF.get(cand.source_type, ())  # the ref its source type needs: any one
    assert not alternatives or any(all(cand.source_ref.get(f) not in (None, "") for f in fields) for fields in alternatives)
    assert cand.intended_role.value != "control"


def test_the_code_builder_pins_the_commit_and_writes_the_line_range():
    item = BUILT["code"]()
    assert item.fields["source_ref"] == {"repo": "pi", "commit": COMMIT, "path": "src/types.ts", "lines": "149-200"}
    assert item.fields["revision"] == COMMIT


def test_the_same_source_gets_the_same_id_at_every_step():
    assert sdk.code("pi", COMMIT, "a.py", "1-2", "x").item_id == sdk.code("pi", COMMIT, "a.py", "1-2", "y").item_id
    assert sdk.web("https://a.org/x", "one").item_id == sdk.web("https://a.org/x", "two").item_id
    assert sdk.plan("x", "plan-42", 5).item_id == "plan-42-r5"


# Each builder: items of one source (their texts differ; any further argument, such as item_id=,
# passed on), and one of another source.
SOURCES = {
    "code": (lambda t, **kw: sdk.code("pi", COMMIT, "a.py", "1-2", t, **kw), lambda: sdk.code("pi", COMMIT, "a.py", "1-3", "x")),
    "web": (lambda t, **kw: sdk.web("https://a.org/x", t, **kw), lambda: sdk.web("https://a.org/y", "x")),
    "file": (lambda t, **kw: sdk.file("notes/plan.md", t, revision=3, **kw), lambda: sdk.file("notes/plan.md", "x", revision=4)),
    "memory": (lambda t, **kw: sdk.memory(t, memory_id="mem-1", **kw), lambda: sdk.memory("x", memory_id="mem-2")),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_default_item_id_names_its_builder_and_is_the_sources_own(name):
    same, other = SOURCES[name]
    first = same("one").item_id
    assert first.startswith(f"{name}-") and len(first) == len(name) + 17, first
    assert all(c in "0123456789abcdef" for c in first[len(name) + 1:])  # a digest's head, in hex
    assert same("two").item_id == first
    assert other().item_id != first and other().item_id.startswith(f"{name}-")
    assert same("one", item_id="mine").item_id == "mine"


def test_a_web_page_records_when_it_was_fetched_and_its_digest():
    item = BUILT["web"]()
    assert item.fields["observed_at"] == "2026-11-30T00:00:00Z"
    assert item.fields["source_ref"]["content_hash"] == sha("page")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: sdk.code("pi", "main", "a.py", "1-2", "x"), "code(commit=...): 'main' is not a commit id"),
        (lambda: sdk.code("pi", COMMIT, "a.py", "lines 1 to 2", "x"), "code(lines=...): expected 'first-last'"),
        (lambda: sdk.code("pi", COMMIT, "", "1-2", "x"), "code(path=...): required"),
        (lambda: sdk.web("ftp://a.org/x", "x"), "web(url=...): 'ftp://a.org/x' is not an http(s) URL"),
        (lambda: sdk.web("https://a.org", "x", fetched_at=datetime(2026, 1, 1)), "web(fetched_at=...): a naive datetime"),
        (lambda: sdk.plan("x", "plan-1", None), "plan(revision=...): required"),
        (lambda: sdk.summary("x", inputs=[]), "summary(inputs=...): required"),
        (lambda: sdk.artifact("plan-42", 5, kind="plan"), "artifact(content_hash=...): required"),
        (lambda: sdk.artifact("plan-42", 5, kind="plan", content_hash="sha256:" + "0" * 64), "artifact(writer=...): required"),
        (lambda: sdk.memory(b"bytes", memory_id="m"), "memory(text=...): expected the content as a string"),
        (lambda: sdk.file("a.md", "x", colour="red"), "file(colour=...): not a candidate field"),
    ],
)
def test_what_a_builder_cannot_compute_is_refused_naming_the_argument(build, message):
    with pytest.raises(sdk.SDKError) as exc:
        build()
    assert message in str(exc.value)


def test_an_artifact_is_a_reinjection_handle_loaded_from_the_store(tmp_path):
    import json

    plan = "1. read the sources\n2. draft"
    (tmp_path / "plan.json").write_text(json.dumps({"artifact_id": "plan-42", "revision": 5, "kind": "plan", "content": plan,
                                                    "writer": "planner", "scope": "local/default/run-a"}))
    session = sdk.Session("chat-agent", model="gpt-4o", run_id="run-a", artifacts=tmp_path)
    step = session.step([{"role": "system", "content": "Plan, then act."}, {"role": "user", "content": "go"}],
                        items=[sdk.artifact("plan-42", 5, kind="plan", content_hash=sha(plan), writer="planner")])
    assert "plan-42-r5" in [i["item_id"] for i in step.manifest["included"]], step.manifest["excluded"]
    [checks] = [i["reinjection_checks"] for i in step.manifest["included"] if i["item_id"] == "plan-42-r5"]
    assert checks["writer_and_source"] == checks["content_hash_and_revision"] == "passed"
    forged = session.step([{"role": "system", "content": "Plan."}, {"role": "user", "content": "go"}],
                          items=[sdk.artifact("plan-42", 5, kind="plan", content_hash=sha("another plan"), writer="planner")])
    assert [e["item_id"] for e in forged.manifest["excluded"]] == ["plan-42-r5"]
