"""Deterministic synthetic workloads for the benchmarks.

`make_request(n_items=2000, total_bytes=6_000_000, seed=5)` builds an AssemblyRequest document
(a plain dict, the JSON an agent would submit) from the worked example: its 28 candidates and 3
tool calls (so every hard gate still rejects something), plus seeded prose, code, JSON and log
candidates with correct `sha256:` content hashes, `n_tool_pairs` tool calls each paired with a
result (JSON, test logs, source excerpts), and a sprinkling of items the gates and ranking must
reject (expired, another tenant, tampered hash, credential-like text, wrong stage, duplicates,
relevance below the floor). `make_policy(context_limit)` is the worked example's policy with budget
numbers scaled to the context limit, so any request of a few MB is under heavy budget pressure:
ranking orders, the budget evicts, and every test log goes through the `failures_plus_artifact_ref`
source-limit transform. `next_step(request)` is the agent's next step: the same candidates with a
small fraction replaced or added, and a new step id; `step_run(request, steps)` chains such steps
into an agent run.

Everything is a pure function of its arguments: the same seed gives byte-identical requests.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import string
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

# The worked example: the shared folder beside the repository, else the vendored copy (the same
# files, checked against its SHA256SUMS by tests/engine/test_examples.py), as tests/golden.py reads it.
EXAMPLE = Path(__file__).resolve().parent.parent.parent / "shared" / "examples" / "research-agent"
if not EXAMPLE.exists():
    EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "research-agent"

PI_COMMIT = "53fa77ccd8a279eb87e92294ef3687b03ff80112"
SCOPE = "tenant-x/project-y/task-42"

_COMMON = (
    "the of and to in is that for it as with was on be by this are or from at an which have not "
    "context token budget model agent source evidence manifest policy revision trust tool call "
    "result summary cache prefix stage item partition eviction window retrieval claim draft review "
    "commit repository function module request response latency error failure test pass value"
).split()


def sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@cache
def _vocabulary(seed: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    made = {"".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 11))) for _ in range(3000)}
    return tuple(_COMMON * 8) + tuple(sorted(made))


def _words(rng: random.Random, vocab: tuple[str, ...], n: int) -> list[str]:
    return rng.choices(vocab, k=n)


def prose(rng: random.Random, size: int) -> str:
    vocab = _vocabulary(1)
    paragraphs: list[str] = []
    used = 0
    while used < size:
        sentences = []
        for _ in range(rng.randint(3, 7)):
            w = _words(rng, vocab, rng.randint(6, 22))
            w[0] = w[0].capitalize()
            sentences.append(" ".join(w) + rng.choice(".!?.."))
        para = " ".join(sentences)
        paragraphs.append(para)
        used += len(para) + 2
    return "\n\n".join(paragraphs)[:size]


def code(rng: random.Random, size: int) -> str:
    vocab = _vocabulary(2)
    out: list[str] = []
    used = 0
    while used < size:
        name = "_".join(_words(rng, vocab, 2))
        args = ", ".join(_words(rng, vocab, rng.randint(1, 4)))
        body = [f"def {name}({args}):", f'    """{" ".join(_words(rng, vocab, 8))}."""']
        for _ in range(rng.randint(3, 12)):
            a, b, c = _words(rng, vocab, 3)
            body.append(rng.choice((
                f"    {a} = {b}.{c}({rng.randint(0, 999)})",
                f"    if {a} > {rng.randint(0, 99)}:\n        return {b}[{c!r}]",
                f"    for {a} in range(len({b})):\n        {c} += {a} * {rng.random():.4f}",
                f"    {a}.append({{'{b}': {c}, 'n': {rng.randint(0, 9999)}}})",
            )))
        body.append(f"    return {rng.choice(vocab)}\n")
        block = "\n".join(body)
        out.append(block)
        used += len(block) + 1
    return "\n".join(out)[:size]


def json_doc(rng: random.Random, size: int) -> str:
    vocab = _vocabulary(3)
    records = []
    used = 2
    while used < size:
        rec = {
            "id": f"{rng.choice(vocab)}-{rng.randint(0, 10**6)}",
            "score": round(rng.random(), 4),
            "tags": _words(rng, vocab, rng.randint(1, 5)),
            "meta": {"owner": rng.choice(vocab), "count": rng.randint(0, 5000), "ok": rng.random() > 0.2},
            "note": " ".join(_words(rng, vocab, rng.randint(4, 16))),
        }
        text = json.dumps(rec)
        records.append(rec)
        used += len(text) + 2
    return json.dumps({"results": records}, indent=1)


def log(rng: random.Random, size: int, *, test: bool = False) -> str:
    vocab = _vocabulary(4)
    lines: list[str] = []
    used = 0
    n = 0
    while used < size:
        n += 1
        if test:
            verdict = rng.choices(("PASSED", "FAILED", "ERROR"), weights=(90, 8, 2))[0]
            line = f"{verdict} tests/test_{rng.choice(vocab)}.py::test_{rng.choice(vocab)}_{n} [{n % 100}%] in {rng.random():.3f}s"
            if verdict != "PASSED":
                line += f"\nE   AssertionError: expected {rng.randint(0, 99)} == {rng.randint(0, 99)}"
        else:
            level = rng.choices(("DEBUG", "INFO", "WARN", "ERROR"), weights=(30, 55, 10, 5))[0]
            line = (
                f"2026-09-06T10:{n // 60 % 60:02d}:{n % 60:02d}.{rng.randint(0, 999):03d}Z {level} "
                f"worker-{rng.randint(1, 8)} {rng.choice(vocab)} id={rng.getrandbits(48):012x} "
                f"took={rng.randint(1, 900)}ms {' '.join(_words(rng, vocab, rng.randint(2, 9)))}"
            )
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)[:size]


def _item(item_id: str, kind: str, source_type: str, source_ref: dict, content: str, **extra: Any) -> dict[str, Any]:
    item = {
        "item_id": item_id,
        "kind": kind,
        "source_type": source_type,
        "source_ref": source_ref,
        "producer": "bench-workload/v1",
        "content": content,
        "content_hash": sha256(content),
        "scope": SCOPE,
        "freshness": "valid",
        "security_class": "internal",
    }
    item.update(extra)
    return item


def _candidate(rng: random.Random, n: int, size: int) -> dict[str, Any]:
    """One synthetic candidate: 35% prose, 30% code, 15% JSON, 20% logs."""
    r = rng.random()
    relevance = round(rng.uniform(0.02, 0.99), 3)
    if r < 0.35:
        return _item(
            f"doc-{n}", "official_document", "official_document",
            {"url": f"https://docs.example.org/page/{n}"}, prose(rng, size),
            trust="external_evidence", intended_role="untrusted_data", relevance=relevance, revision="2026-09-06",
        )
    if r < 0.65:
        lo = rng.randint(1, 4000)
        text = code(rng, size)
        hi = lo + len(text.splitlines()) - 1  # the range the excerpt really spans, as a source tool reports it
        return _item(
            f"code-{n}", "evidence", "repository_source",
            {"repo": "pi", "commit": PI_COMMIT, "path": f"packages/agent/src/mod_{n}.py", "lines": f"{lo}-{hi}"},
            text, trust="repository_evidence", intended_role="untrusted_data", relevance=relevance, revision=PI_COMMIT,
        )
    if r < 0.80:
        if rng.random() < 0.5:
            return _item(
                f"memory-{n}", "memory", "memory_object", {"memory_id": f"mem-{n}"}, json_doc(rng, size),
                trust="governed_memory_candidate", intended_role="state", relevance=relevance,
            )
        return _item(
            f"file-{n}", "background", "editable_project_file", {"path": f"data/records_{n}.json"}, json_doc(rng, size),
            trust="project_editable", intended_role="untrusted_data", relevance=relevance,
        )
    return _item(
        f"trace-{n}", "trace", "trace", {"trace_id": f"trace-{n}"}, log(rng, size),
        # A trace has no trust default: it enters only as data, and only at a diagnostic stage.
        trust="external_evidence", intended_role="untrusted_data", relevance=relevance,
    )


def _tool_pair(rng: random.Random, n: int, size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    call_id = f"call-bench-{n}"
    kind = n % 3
    status = rng.choices(("success", "partial", "error"), weights=(80, 12, 8))[0]
    if kind == 0:
        content = log(rng, size, test=True)
        result = _item(
            f"result-{call_id}", "tool_result", "test_log",
            {"repo": "pi", "commit": PI_COMMIT, "artifact_id": f"testlog-bench-{n}"}, content,
            trust="repository_evidence", intended_role="untrusted_data", call_id=call_id, revision=PI_COMMIT,
        )
        call = {"call_id": call_id, "tool_name": "run_tests", "arguments": {"repo": "pi", "suite": f"suite-{n}"}}
    elif kind == 1:
        content = json_doc(rng, size)
        result = _item(
            f"result-{call_id}", "tool_result", "tool_result", {"tool_call_id": call_id, "tool": "search_index"}, content,
            trust="external_evidence", intended_role="untrusted_data", call_id=call_id,
        )
        call = {"call_id": call_id, "tool_name": "search_index", "arguments": {"query": f"q{n}", "limit": 20}}
    else:
        lo = rng.randint(1, 3000)
        content = code(rng, size)
        result = _item(
            f"result-{call_id}", "tool_result", "tool_result",
            {"repo": "pi", "commit": PI_COMMIT, "path": f"src/file_{n}.py", "lines": f"{lo}-{lo + 80}"}, content,
            trust="repository_evidence", intended_role="untrusted_data", call_id=call_id, revision=PI_COMMIT,
        )
        call = {"call_id": call_id, "tool_name": "read_source", "arguments": {"repo": "pi", "path": f"src/file_{n}.py", "lines": f"{lo}-{lo + 80}"}}
    call.update(status=status, result_item_id=result["item_id"], completed_seq=rng.randint(1, 10_000) * 100_000 + n)
    # (completion order random, each call its own place: the request refuses two calls at one place)
    return call, result


def _spoil(rng: random.Random, item: dict[str, Any], n: int) -> None:
    """Make roughly 6% of the synthetic items fail a gate or lose ranking, each for a known reason."""
    r = rng.random()
    if r < 0.01:
        item["freshness"] = "expired"
    elif r < 0.015:
        item["scope"] = "tenant-z/project-q/task-9"
    elif r < 0.02:
        item["content_hash"] = sha256(item["content"] + " tampered")
    elif r < 0.023:
        item["content"] += f"\nexport AWS_KEY=AKIA{''.join(rng.choices(string.ascii_uppercase + string.digits, k=16))}\n"
        item["content_hash"] = sha256(item["content"])
    elif r < 0.04:
        item["stages"] = ["review"]
    elif r < 0.05:
        item["relevance"] = 0.01


def make_request(
    n_items: int = 2000,
    total_bytes: int = 6_000_000,
    *,
    n_tool_pairs: int = 40,
    context_limit: int = 128_000,
    seed: int = 5,
    example: bool = True,
) -> dict[str, Any]:
    """`n_items` candidates in all (tool results included) of about `total_bytes` of content."""
    rng = random.Random(seed)
    base = json.loads((EXAMPLE / "request.json").read_text())
    request = copy.deepcopy(base)
    request["run_id"] = f"bench-run-{seed}"
    request["model"]["context_limit"] = context_limit
    # gpt-4 counts with cl100k_base, exact (ctxeng.engine.estimators): the encoding the floor and the
    # trim_messages baseline count with, so every ratio compares like with like.
    request["model"]["name"] = "gpt-4"
    if not example:
        keep = {"instruction", "goal", "required_repository_manifest", "hard_constraints", "current_stage", "open_items_summary"}
        request["candidates"] = [c for c in base["candidates"] if c["kind"] in keep]
        request["tool_calls"] = []
    candidates: list[dict[str, Any]] = request["candidates"]
    base_bytes = sum(len(c["content"]) for c in candidates)
    n_synthetic = max(0, n_items - len(candidates))
    mean = max(64, (total_bytes - base_bytes) // max(1, n_synthetic))
    pairs = min(n_tool_pairs, n_synthetic)
    for n in range(pairs):
        call, result = _tool_pair(rng, n, int(mean * rng.uniform(0.3, 1.7)))
        request["tool_calls"].append(call)
        candidates.append(result)
    contents: list[str] = []
    for n in range(n_synthetic - pairs):
        item = _candidate(rng, n, int(mean * rng.uniform(0.3, 1.7)))
        if contents and rng.random() < 0.01:  # a duplicate of an earlier item's content loses ranking
            item["content"] = rng.choice(contents)
            item["content_hash"] = sha256(item["content"])
        else:
            _spoil(rng, item, n)
        contents.append(item["content"])
        candidates.append(item)
    return request


def next_step(request: dict[str, Any], *, changed: float = 0.03, seed: int = 6) -> dict[str, Any]:
    """The agent's next step: a new step id, `changed` of the synthetic items re-fetched with new content."""
    rng = random.Random(seed)
    nxt = dict(request)
    nxt["step_id"] = request["step_id"] + "-next"
    cands = []
    for item in request["candidates"]:
        if item["producer"] == "bench-workload/v1" and item.get("call_id") is None and rng.random() < changed:
            item = dict(item)
            item["content"] = item["content"] + f"\n(updated at step {seed}: {rng.getrandbits(64):016x})"
            item["content_hash"] = sha256(item["content"])
        cands.append(item)
    nxt["candidates"] = cands
    return nxt


def step_run(request: dict[str, Any], steps: int, *, changed: float = 0.10) -> Iterator[dict[str, Any]]:
    """An agent run of `steps` steps: `request`, then each step `next_step` of the one before.

    Step k (k >= 1) re-fetches `changed` of the synthetic non-tool items with new content (the
    changes accumulate from step to step); its step id is the first step's with `-k` appended.
    """
    current = request
    for k in range(steps):
        if k:
            current = next_step(current, changed=changed, seed=k)
            current["step_id"] = f"{request['step_id']}-{k}"
        yield current


def make_policy(context_limit: int = 128_000) -> dict[str, Any]:
    """The worked example's policy with its budget scaled to `context_limit` (partition shares kept)."""
    from ctxeng.engine.errors import load_yaml_text

    policy = load_yaml_text((EXAMPLE / "policy.yaml").read_bytes(), what="policy")
    b = policy["budget"]
    reserve = min(4096, context_limit // 8)
    overhead = min(1000, context_limit // 32)
    margin = min(2000, context_limit // 32)
    usable = context_limit - reserve - overhead - margin
    b.update(model_context_limit=context_limit, response_reserve=reserve, protocol_overhead=overhead, safety_margin=margin)
    parts = b["partitions"]
    parts["control"]["minimum"] = max(1000, usable // 16)
    parts["state"]["minimum"] = usable // 8
    parts["direct_evidence"]["minimum"] = usable // 4
    parts["recent_tool_pairs"]["minimum"] = usable // 8
    parts["background"]["maximum"] = max(1000, usable // 10)
    policy["admission"]["min_relevance"] = 0.05
    # The benchmark step reads its traces (the example's stage counts as diagnostic here), so they
    # pass the gates and compete for the background budget, as a debugging step's traces do.
    policy["retrieval"]["diagnostic_stages"] = ["drafting"]
    return policy


def request_bytes(request: dict[str, Any]) -> int:
    return sum(len(c["content"].encode("utf-8")) for c in request["candidates"])


def dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")
