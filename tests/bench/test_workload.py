"""The benchmark workload is a valid request whose content hashes are right (no timing here)."""

from __future__ import annotations

import hashlib

from bench import workload
from ctxeng.engine import assemble, parse_policy, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer


def test_the_workload_is_a_valid_request_with_correct_hashes_that_assembles_ready():
    body = workload.make_request(n_items=120, total_bytes=200_000, n_tool_pairs=12)
    tampered = 0
    for item in body["candidates"]:
        actual = "sha256:" + hashlib.sha256(item["content"].encode("utf-8")).hexdigest()
        tampered += actual != item["content_hash"]
    assert tampered <= 3  # only the deliberately tampered items
    request = parse_request(body)
    result = assemble(request, parse_policy(workload.make_policy(16_000)))
    assert result.status == "ready"
    reasons = {e.reason.value for e in result.manifest.excluded}
    assert "budget_evicted" in reasons and "ranking_lost" in reasons
    assert any(t.transformer_version.startswith("source-limit/failures_plus_artifact_ref") for t in result.manifest.transforms)


def test_the_workload_is_deterministic_and_the_next_step_changes_a_few_contents():
    a = workload.make_request(n_items=60, total_bytes=60_000, n_tool_pairs=6)
    assert a == workload.make_request(n_items=60, total_bytes=60_000, n_tool_pairs=6)
    b = workload.next_step(a, changed=0.2)
    changed = sum(x["content_hash"] != y["content_hash"] for x, y in zip(a["candidates"], b["candidates"], strict=True))
    assert 0 < changed < len(a["candidates"])


def test_counting_a_fence_header_in_two_parts_gives_the_same_count_as_the_whole():
    tok = TiktokenTokenizer()
    prefix = "<<<ctxeng:block nonce=0a1b2c3d4e5f6789"
    for suffix in (' {"item_id":"x","kind":"evidence"}>>>', ' {"content_hash":"sha256:00ff"}>>>', ' ["a"]>>>'):
        assert tok.encode_count(prefix + suffix) == tok.encode_count(prefix) + tok.encode_count(suffix)
        assert tok.encode_count(prefix + suffix) == len(tok._enc.encode_ordinary(prefix + suffix))
