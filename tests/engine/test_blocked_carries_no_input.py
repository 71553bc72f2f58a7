"""A blocked assembly carries no input of any kind, whatever blocked it (issue 31, class 4).

DESIGN: "blocked: the manifest is sealed with the reason and no model input is produced", "both
input hashes absent". Over generated requests forced to block by each cause the engine has —
a resident kind with no candidate, a required item a gate rejects, partition minimums the usable
input cannot hold, a required summary failing its assertions, a rendered fence that misstates its
item — the result and its manifest hold:

- no rendered input and no serialized input (`AssemblyResult`: every field but the manifest and
  the timings is None);
- no hash or count of either: `assembly_input_hash`, `serialized_model_input_hash`,
  `budget.framing_tokens`, `budget.payload_tokens`, and no cache prefix (`cache.prefix_hash`,
  `cache.prefix_identity`, `cache.provider_marker`, `cache.invalidation_keys`): they identify a
  payload that never exists;
- no candidate's content anywhere in the manifest, except `transforms[].before_excerpt` /
  `after_excerpt`: those record what a transform was given and made — the evidence a reviewer
  needs to see why its assertions failed (`transform_blocked`) — and are never model input.

The oracle is independent of the engine: the candidates' own texts, searched for in every string
of the manifest as JSON.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxeng.engine import assemble, parse_policy, parse_request, pipeline

from .builders import CREATED_AT, base_items, item, policy, request, sha
from .test_properties import cases

# Evidence of a transform decision, kept by design (module docstring); every other string is searched.
EXCERPT_FIELDS = ("before_excerpt", "after_excerpt")
SHORTEST_SEARCHED = 16  # shorter texts ("ok", "stage: drafting") may occur in a manifest by chance

LOSSY_SUMMARY = "Goal: keep going\nConstraints: none\nOpen Items: none (marker-lossy-summary)"

CAUSES = (
    "as_generated",
    "resident_kind_missing",
    "required_item_rejected",
    "minimums_exceed_usable",
    "never_partition_overflows",
    "required_summary_lossy",
    "fence_misstates_its_item",
)


def _usable(pol: dict) -> int:
    b = pol["budget"]
    return b["model_context_limit"] - b["response_reserve"] - b["protocol_overhead"] - b["safety_margin"]


def force(cause: str, req: dict, pol: dict, *, small_model: bool = False, words: int = 400) -> tuple[dict, dict]:
    """`req` and `pol` changed so that `cause` blocks the assembly (unless another cause is first)."""
    req, pol = copy.deepcopy(req), copy.deepcopy(pol)
    if cause == "resident_kind_missing":
        req["candidates"] = [c for c in req["candidates"] if c["kind"] != "open_items_summary"]
        pol["resident"]["include"] = sorted({*pol["resident"]["include"], "open_items_summary"})
    elif cause == "required_item_rejected":
        content = "marker-required-tampered the one item this step cannot do without"
        req["candidates"].append(item("required-tampered", "repository_source", content, required=True, content_hash=sha(content + "!")))
    elif cause == "minimums_exceed_usable":
        # The policy refuses minimums over its own usable budget, so the model is the smaller one:
        # minimums the policy's model holds, a third of its context (or none) to hold them in.
        parts = pol["budget"]["partitions"]
        share = _usable(pol) // (len(parts) + 1)
        for part in parts.values():
            part["minimum"] = share
            part.pop("maximum", None)
        req["model"]["context_limit"] = 1 if small_model else pol["budget"]["model_context_limit"] // 3
    elif cause == "never_partition_overflows":
        control = pol["budget"]["partitions"]["control"]  # eviction never: what does not fit blocks
        control["maximum"] = control["minimum"] + 5
        rules = " ".join(f"rule{i}" for i in range(words))
        req["candidates"].append(item("long-instruction", "system_policy", f"marker-long-instruction {rules}"))
    elif cause == "required_summary_lossy":
        req["candidates"].append(
            item(
                "required-summary",
                "model_summary",
                LOSSY_SUMMARY,
                required=True,
                input_item_ids=["turn-1"],
                source_refs=[{"path": "a.ts"}],  # no repository and commit: fails `source_refs`
                preserves={"open_item_ids": []},
            )
        )
        if "source_refs" not in pol["transforms"]["preserve"]:
            pol["transforms"]["preserve"].append("source_refs")
    elif cause == "fence_misstates_its_item":
        # Nothing required, so the earlier causes step aside and the rendered input is checked.
        pol["resident"]["include"] = []
        for cand in req["candidates"]:
            cand.pop("required", None)
        req["candidates"].append(item("fenced-evidence", "repository_source", "marker-fenced-evidence read from the repository", relevance=1.0))
    return req, pol


@st.composite
def blocked_cases(draw) -> tuple[dict, dict, str]:
    req, pol = draw(cases())
    cause = draw(st.sampled_from(CAUSES))
    req, pol = force(cause, req, pol, small_model=draw(st.booleans()), words=draw(st.integers(200, 600)))
    return req, pol, cause


def _misstate_first_fence(out: dict[str, Any]) -> None:
    """Rewrite a fenced block's header (the forced evidence's, else the first) to claim task
    authority, which `structure_checks`' `trust` compares with the admitted item."""
    blocks = [b for b in out.get("blocks", []) if not b.get("native")]
    for block in sorted(blocks, key=lambda b: b.get("item_id") != "fenced-evidence"):
        first, sep, rest = block["text"].partition("\n")
        if " untrusted" in first:
            block["text"] = first.replace(" untrusted", " task", 1) + sep + rest
            return


def _assemble(req: dict, pol: dict, cause: str) -> pipeline.AssemblyResult:
    if cause != "fence_misstates_its_item":
        return assemble(parse_request(req), parse_policy(pol), created_at=CREATED_AT)
    real = pipeline.render

    def tampered(asm, included):
        out = real(asm, included)
        _misstate_first_fence(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "render", tampered)
        return assemble(parse_request(req), parse_policy(pol), created_at=CREATED_AT)


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string in `value` (keys included) with its JSON path."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out.append((f"{path}.{k}#key", str(k)))
            out.extend(_strings(v, f"{path}.{k}"))
        return out
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    return []


def assert_carries_no_input(result: pipeline.AssemblyResult, candidate_texts: list[str]) -> None:
    m = result.manifest
    a = m.assembly
    # The result: nothing but the manifest (and the wall-clock timings kept outside it).
    held = {k: v for k, v in vars(result).items() if k not in ("manifest", "stage_timings") and v is not None}
    assert held == {}, sorted(held)
    # No hash or count of an input that is never produced.
    assert a.assembly_input_hash is None and a.serialized_model_input_hash is None
    assert m.budget.framing_tokens is None and m.budget.payload_tokens is None
    c = m.cache
    assert c.prefix_hash is None and c.prefix_identity is None and c.provider_marker is None, c
    assert c.invalidation_keys == {} and c.prefix_source_ids == [], c
    assert c.status == "bypassed", c
    # No candidate's text anywhere but in the transform excerpts (kept: evidence of a decision).
    searched = [
        (path, s) for path, s in _strings(m.model_dump(mode="json"))
        if not (path.startswith(".transforms[") and path.rsplit(".", 1)[-1] in EXCERPT_FIELDS)
    ]
    for text in candidate_texts:
        if len(text) >= SHORTEST_SEARCHED:
            leaked = [path for path, s in searched if text in s]
            assert not leaked, (text[:60], leaked)


def _texts(req: dict) -> list[str]:
    return [c["content"] for c in req["candidates"] if isinstance(c.get("content"), str)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(blocked_cases())
def test_a_blocked_assembly_carries_no_input_of_any_kind_whatever_blocked_it(case):
    req, pol, cause = case
    r = _assemble(req, pol, cause)
    if r.manifest.assembly.status != "blocked":
        return  # a cause another part of the draw defused; the guard below counts what is reached
    assert r.manifest.assembly.blocked_reason is not None and r.manifest.assembly.missing
    assert_carries_no_input(r, _texts(req))


# What each forced cause blocks for on some of its draws (a draw's own budget may block it sooner;
# minimums beyond a small model's whole window exhaust the budget instead of missing a partition).
# A label is the blocked reason, then the cause heading its detail when there is one: the seed's
# controlled set has two reasons, the precise cause is a detail (`budget_exhausted: ...`).
REACHES = {
    "resident_kind_missing": {"required_partition_missing"},
    "required_item_rejected": {"required_partition_missing"},
    "minimums_exceed_usable": {"required_partition_missing", "required_partition_missing/budget_exhausted"},
    "never_partition_overflows": {"required_partition_missing/budget_exhausted"},
    "required_summary_lossy": {"transform_blocked"},
    "fence_misstates_its_item": {"transform_blocked/structure_check_failed"},
}
CAUSES_IN_DETAIL = ("budget_exhausted", "structure_check_failed")


def blocked_label(assembly) -> str:
    """`reason` or `reason/cause`: the cause read from the head of the first detail line naming one."""
    caused = [line.split(":", 1)[0] for line in assembly.blocked_detail if line.split(":", 1)[0] in CAUSES_IN_DETAIL]
    return assembly.blocked_reason.value + (f"/{caused[0]}" if caused else "")


@pytest.mark.parametrize("cause", sorted(REACHES))
def test_the_blocked_generator_reaches_every_reason_the_engine_blocks_for(cause):
    """Guard on the generator: the property above is over every blocked_reason, not one. Drawn
    cause by cause: Hypothesis mixes literal constants of every local module loaded so far into its
    draws, so which causes a derandomized draw over all of them lands on depends on what the test
    process imported before (all seven reached alone; in the full engine run the fenced cause was
    drawn twice in 80 and missed)."""
    reasons: Counter[str] = Counter()

    @settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases(), st.booleans(), st.integers(200, 600))
    def sample(drawn, small_model, words):
        req, pol = force(cause, *drawn, small_model=small_model, words=words)
        a = _assemble(req, pol, cause).manifest.assembly
        if a.status == "blocked":
            reasons[blocked_label(a)] += 1

    sample()
    assert set(reasons) & REACHES[cause], reasons


def test_the_causes_together_reach_every_reason_the_engine_blocks_for():
    assert {label.split("/")[0] for label in set().union(*REACHES.values())} == {"required_partition_missing", "transform_blocked"}
    assert {label.split("/", 1)[1] for label in set().union(*REACHES.values()) if "/" in label} == set(CAUSES_IN_DETAIL)
    assert set(REACHES) == set(CAUSES) - {"as_generated"}


PINNED = [
    ("resident_kind_missing", {}, "required_partition_missing"),
    ("required_item_rejected", {}, "required_partition_missing"),
    ("minimums_exceed_usable", {}, "required_partition_missing"),
    ("minimums_exceed_usable", {"small_model": True}, "required_partition_missing/budget_exhausted"),
    ("never_partition_overflows", {}, "required_partition_missing/budget_exhausted"),
    ("required_summary_lossy", {}, "transform_blocked"),
    ("fence_misstates_its_item", {}, "transform_blocked/structure_check_failed"),
]


@pytest.mark.parametrize(("cause", "options", "reason"), PINNED, ids=[f"{c}-{r.replace('/', '-')}" for c, _, r in PINNED])
def test_each_cause_on_the_plain_request_blocks_for_its_reason_and_carries_no_input(cause, options, reason):
    """Each cause once on a request that is otherwise ready, so every reason is checked on every run
    (the property draws them at random)."""
    base_req, base_pol = request(), policy()
    assert _assemble(base_req, base_pol, "as_generated").manifest.assembly.status == "ready"
    req, pol = force(cause, base_req, base_pol, **options)
    r = _assemble(req, pol, cause)
    assert (r.manifest.assembly.status, blocked_label(r.manifest.assembly)) == ("blocked", reason)
    assert_carries_no_input(r, _texts(req))


def test_a_blocked_transform_keeps_its_excerpts_as_evidence_and_nothing_else_of_its_text():
    """The distinction the property draws, pinned: the failed summary's text is in its transform
    record's excerpt (why it failed) and nowhere else in the manifest."""
    summary = item(
        "required-summary", "model_summary", LOSSY_SUMMARY, required=True, input_item_ids=["turn-1"],
        source_refs=[{"path": "a.ts"}], preserves={"open_item_ids": []},
    )
    req = request([*base_items(), summary])
    r = _assemble(req, policy(), "required_summary_lossy")
    m = r.manifest
    assert (m.assembly.status, m.assembly.blocked_reason) == ("blocked", "transform_blocked")
    (record,) = [t for t in m.transforms if t.output_item_id == "required-summary"]
    assert LOSSY_SUMMARY in record.after_excerpt + record.before_excerpt
    assert_carries_no_input(r, _texts(req))
