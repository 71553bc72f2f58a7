"""One list of seed §8's mechanisms (`ctxeng.engine.upgrades.REGISTRY`), read by validation, the
policy editor and docs/conformance.md. The walk below is written here, apart from the registry: it
finds every field of the policy format, and each must be a registered mechanism or say why it is
not one — so a clause added to the policy model that loads more cannot ship without a §8 record."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from ctxeng.engine import parse_policy
from ctxeng.engine.errors import load_yaml_text
from ctxeng.engine.models import ContextPolicy, RetrievalPolicy
from ctxeng.engine.upgrades import NOT_MECHANISMS, REGISTRY, missing_records, registry_table
from tests.golden import examples_dir

from .builders import item, policy, request, run

REPO = Path(__file__).resolve().parents[2]


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every leaf field of `model`: nested models by dotted path, a map's values as `*`, a list's items as `[]`."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        inner = _models(field.annotation)
        if not inner:
            out.append(path)
            continue
        origin = typing.get_origin(field.annotation)
        out += field_paths(inner[0], path + (".*." if origin is dict else "[]." if origin is list else "."))
    return out


def unclassified(model: type[BaseModel]) -> list[str]:
    registered = {m.clause for m in REGISTRY}
    return [p for p in field_paths(model) if p not in registered and p not in NOT_MECHANISMS]


def test_every_policy_field_is_a_registered_mechanism_or_says_why_it_is_not():
    assert unclassified(ContextPolicy) == []
    assert all(len(reason) > 10 for reason in NOT_MECHANISMS.values())


def test_the_registry_names_only_fields_the_policy_has_and_none_twice():
    paths = set(field_paths(ContextPolicy))
    clauses = [m.clause for m in REGISTRY]
    assert len(clauses) == len(set(clauses))
    assert set(clauses) <= paths and set(NOT_MECHANISMS) <= paths
    assert not set(clauses) & set(NOT_MECHANISMS)


def test_a_field_added_to_the_policy_model_without_an_entry_fails_the_walk():
    class WiderRetrieval(RetrievalPolicy):
        prefetch_sources: list[str] = []

    class WiderPolicy(ContextPolicy):
        retrieval: WiderRetrieval = WiderRetrieval()

    assert unclassified(WiderPolicy) == ["retrieval.prefetch_sources"]


def test_docs_conformance_carries_the_registry_table():
    doc = (REPO / "docs" / "conformance.md").read_text(encoding="utf-8")
    table = doc.split("<!-- mechanisms:start -->\n", 1)[1].split("\n<!-- mechanisms:end -->", 1)[0]
    assert table == registry_table(), "docs/conformance.md's mechanism table is stale: paste ctxeng.engine.upgrades.registry_table()"
    for clause in ("retrieval.diagnostic_stages", "transforms.allowed", "budget.partitions.*.eviction"):
        assert f"| {clause} |" in table


# --------------------------------------------------------------------------- diagnostic_stages


@pytest.fixture(scope="module")
def body() -> dict:
    return load_yaml_text((examples_dir() / "research-agent" / "policy.yaml").read_text(), what="policy")


def _with_stage(body: dict, stage: str, *, recorded: bool) -> dict:
    out = copy.deepcopy(body)
    out["retrieval"]["diagnostic_stages"] = [*out["retrieval"].get("diagnostic_stages", []), stage]
    if recorded:
        out["upgrades"] = [*out.get("upgrades", []), {
            "mechanism": f"retrieval.diagnostic_stages.{stage}", "addresses": ["assembly-1"],
            "failure": "the drafting step repeated a failed command its trace showed", "shows": "blocked: required_partition_missing",
            "new_failure_modes": "old traces crowd out evidence", "cost": "trace tokens at every drafting step",
            "revocation": "take it out when drafting steps stop repeating commands",
            "revoke_when": {"shows": "*: excluded budget_evicted", "at_least": 3, "of_last": 10}}]
    return out


def _validate(tmp_path: Path, new: dict, old: dict) -> subprocess.CompletedProcess:
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(old))
    return subprocess.run([sys.executable, "-m", "ctxeng", "validate-policy", str(tmp_path / "new.json"), "--previous", str(tmp_path / "old.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_loading_traces_at_a_new_diagnostic_stage_without_a_record_is_refused_by_validate_policy(body, tmp_path):
    assert "drafting" not in body["retrieval"].get("diagnostic_stages", [])
    refused = _validate(tmp_path, _with_stage(body, "drafting", recorded=False), body)
    assert refused.returncode == 2
    at = len(body["retrieval"].get("diagnostic_stages", []))
    assert f"retrieval.diagnostic_stages[{at}]: 'drafting' is new since" in refused.stderr
    assert "'retrieval.diagnostic_stages.drafting'" in refused.stderr
    accepted = _validate(tmp_path, _with_stage(body, "drafting", recorded=True), body)
    assert accepted.returncode == 0, accepted.stderr


def test_the_engine_refuses_the_same_widening_and_its_removal_needs_no_record(body):
    old, new = parse_policy(body), parse_policy(_with_stage(body, "drafting", recorded=False))
    (line,) = missing_records(old, new)
    assert line.startswith("retrieval.diagnostic_stages[") and "'retrieval.diagnostic_stages.drafting'" in line
    assert missing_records(new, old) == []
    assert missing_records(old, parse_policy(_with_stage(body, "drafting", recorded=True))) == []


def test_the_widening_is_real_a_trace_is_loaded_at_the_new_stage_only():
    trace = item("tr-1", "trace", "trace tr-1: read_source pi", trust="external_evidence", intended_role="untrusted_data")
    before, after = policy(retrieval={"diagnostic_stages": []}), policy(retrieval={"diagnostic_stages": ["drafting"]})
    assert "tr-1" in run(request(extra=[trace], stage="drafting"), before).manifest.excluded_reasons()
    assert "tr-1" in run(request(extra=[trace], stage="drafting"), after).manifest.included_ids()


@pytest.mark.parametrize("change, field", [
    (lambda b: b["admission"].__setitem__("allow_incomplete", ["diagnostic"]), "admission.allow_incomplete[0]"),
    (lambda b: b["resident"].__setitem__("when_present", [*b["resident"].get("when_present", []), "current_draft"]), "resident.when_present["),
])
def test_other_registered_widenings_need_a_record_too(body, change, field):
    new = copy.deepcopy(body)
    change(new)
    (line,) = missing_records(parse_policy(body), parse_policy(new))
    assert line.startswith(field)


def _limit(body: dict, **limit) -> dict:
    out = copy.deepcopy(body)
    out.setdefault("source_limits", {})["repository"] = limit
    return out


def test_raising_a_source_limit_needs_a_record_and_lowering_or_adding_one_none(body):
    low = _limit(body, default="excerpt_with_line_range", max_tokens=2000)
    high = _limit(body, default="excerpt_with_line_range", max_tokens=4000)
    unstated = _limit(body, default="excerpt_with_line_range")  # the engine's ceiling: 1000
    (line,) = missing_records(parse_policy(low), parse_policy(high))
    assert line.startswith("source_limits.repository.max_tokens: '4000' is new since")
    (line,) = missing_records(parse_policy(unstated), parse_policy(low))
    assert line.startswith("source_limits.repository.max_tokens: '2000' is new since")
    assert missing_records(parse_policy(high), parse_policy(low)) == []
    without = copy.deepcopy(body)
    without.get("source_limits", {}).pop("repository", None)
    assert missing_records(parse_policy(without), parse_policy(high)) == []  # a limit where there was none narrows


def test_loading_a_limited_source_whole_needs_a_record(body):
    (line,) = missing_records(parse_policy(_limit(body, default="excerpt_with_line_range")), parse_policy(_limit(body, default="whole")))
    assert line.startswith("source_limits.repository.default: 'whole' is new since")


def test_the_registrys_unstated_ceiling_is_the_one_source_limits_applies():
    # upgrades reads the policy format only (an import-linter contract), so it states the number again.
    from ctxeng.engine.source_limits import DEFAULT_EXCERPT_TOKENS
    from ctxeng.engine.upgrades import DEFAULT_CEILING

    assert DEFAULT_CEILING == DEFAULT_EXCERPT_TOKENS
