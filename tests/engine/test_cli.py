"""`python -m ctxeng`: the worked examples through the CLI, exit codes, and `path: message` errors."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ctxeng.cli import main
from tests.golden import check_expected, examples_dir, load_example

from .builders import policy, request, sha

REPO = Path(__file__).resolve().parents[2]


def ctxeng_process(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The real command, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "ctxeng", *args], cwd=REPO, capture_output=True, text=True, input=stdin)


def ctxeng(*args: str) -> subprocess.CompletedProcess:
    """The same entry point in-process (fast): exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def example():
    return examples_dir() / "research-agent"


def test_the_worked_example_is_ready_through_the_cli_and_reaches_every_decision(example, tmp_path):
    m, i = tmp_path / "manifest.json", tmp_path / "input.json"
    out = ctxeng_process("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"), "--manifest-out", str(m), "--input-out", str(i))
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("ready:")
    check_expected(json.loads(m.read_text()), json.loads(i.read_text()), load_example("expected.json"))


def test_the_blocked_example_exits_3_and_writes_no_model_input(example, tmp_path):
    m, i = tmp_path / "manifest.json", tmp_path / "input.json"
    i.write_text("stale input from an earlier run")
    out = ctxeng_process("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request-blocked.json"), "--manifest-out", str(m), "--input-out", str(i))
    assert out.returncode == 3, out.stderr
    assert "blocked_reason=required_partition_missing" in out.stderr
    assert not i.exists()
    check_expected(json.loads(m.read_text()), None, load_example("expected-blocked.json"))


def test_the_manifest_goes_to_stdout_without_manifest_out(example):
    out = ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"))
    assert out.returncode == 0
    check_expected(json.loads(out.stdout), None, load_example("expected.json"))
    assert out.stderr.startswith("ready:")


def test_a_dash_for_an_output_file_is_stdout_and_no_file_named_dash(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"),
                 "--manifest-out", "-")
    assert out.returncode == 0, out.stderr
    check_expected(json.loads(out.stdout), None, load_example("expected.json"))
    assert list(tmp_path.iterdir()) == []


def test_the_request_can_come_from_stdin(example):
    out = ctxeng_process("assemble", "--policy", str(example / "policy.yaml"), "--request", "-", stdin=(example / "request.json").read_text())
    assert out.returncode == 0, out.stderr
    from_stdin = json.loads(out.stdout)
    check_expected(from_stdin, None, load_example("expected.json"))
    # The same request read from its file gives the same decisions and the same model input.
    from_file = json.loads(ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json")).stdout)
    for key in ("status", "assembly_input_hash", "serialized_model_input_hash"):
        assert from_stdin["assembly"][key] == from_file["assembly"][key], key
    assert from_stdin["assembly"]["serialized_model_input_hash"].startswith("sha256:")
    assert [i["item_id"] for i in from_stdin["included"]] == [i["item_id"] for i in from_file["included"]]


def test_invalid_input_exits_2_with_one_path_message_line_per_error_and_no_traceback(tmp_path):
    req = request()
    del req["candidates"][3]["item_id"]
    req["candidates"][0]["freshness"] = "fresh"
    (tmp_path / "r.json").write_text(json.dumps(req))
    (tmp_path / "p.json").write_text(json.dumps(policy()))
    out = ctxeng("assemble", "--policy", str(tmp_path / "p.json"), "--request", str(tmp_path / "r.json"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert "invalid: candidates[3].item_id: field required" in lines
    assert any(ln.startswith("invalid: candidates[0].freshness: unknown value 'fresh'") for ln in lines)
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_an_invalid_policy_exits_2_naming_the_policy_path(tmp_path):
    pol = policy()
    pol["budget"]["partitions"]["control"]["eviction"] = "sometimes"
    (tmp_path / "p.json").write_text(json.dumps(pol))
    (tmp_path / "r.json").write_text(json.dumps(request()))
    out = ctxeng("assemble", "--policy", str(tmp_path / "p.json"), "--request", str(tmp_path / "r.json"))
    assert out.returncode == 2
    assert out.stderr.startswith("invalid: policy: budget.partitions.control.eviction: unknown value 'sometimes'")


def test_a_missing_file_or_malformed_json_exits_2(tmp_path, example):
    out = ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and "cannot read" in out.stderr
    (tmp_path / "bad.json").write_text("{")
    out = ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(tmp_path / "bad.json"))
    assert out.returncode == 2 and "body: malformed JSON" in out.stderr


def test_a_usage_error_exits_2_naming_the_missing_argument():
    out = ctxeng("assemble", "--policy", "x")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == "ctxeng: the following arguments are required: --request"


def test_validate_policy_prints_the_label_and_digest(example, tmp_path):
    out = ctxeng("validate-policy", str(example / "policy.yaml"))
    assert out.returncode == 0
    line = out.stdout.strip()
    assert re.fullmatch(r"valid: source-research/3 digest sha256:[0-9a-f]{64}", line), line
    # The same policy as JSON with its keys sorted prints the same digest; one changed value does not.
    body = yaml.safe_load((example / "policy.yaml").read_text())
    body["expiry"]["on"] = body["expiry"].pop(True)  # PyYAML reads the key `on:` as YAML 1.1's true
    (tmp_path / "same.json").write_text(json.dumps(body, sort_keys=True))
    assert ctxeng("validate-policy", str(tmp_path / "same.json")).stdout.strip() == line
    body["budget"]["safety_margin"] += 1
    (tmp_path / "changed.json").write_text(json.dumps(body))
    changed = ctxeng("validate-policy", str(tmp_path / "changed.json"))
    assert changed.returncode == 0 and changed.stdout.strip() != line
    assert changed.stdout.startswith("valid: source-research/3 digest sha256:")


def _example_body(text: str) -> dict:
    """The example policy as data: YAML 1.1 reads the key `on:` as True; numbers stay numbers (the
    policy model takes no number as text)."""
    body = yaml.safe_load(text)
    body["expiry"]["on"] = body["expiry"].pop(True)
    return body


def test_validate_policy_with_previous_refuses_each_added_mechanism_without_an_upgrade_record(example, tmp_path):
    text = (example / "policy.yaml").read_text()
    old = tmp_path / "old.yaml"
    old.write_text(text)
    body = _example_body(text)
    body["policy"]["revision"] = 4
    body["cache"]["stable_prefix_sources"].append("user_request")  # a new stable-prefix source
    body["budget"]["partitions"]["state"]["eviction"] = "reduce_candidates"  # a changed eviction rule
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(body))
    out = ctxeng("validate-policy", str(new), "--previous", str(old))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("invalid: cache.stable_prefix_sources[1]: 'user_request' is new since source-research/3")
    assert "'cache.stable_prefix_sources.user_request'" in lines[0]
    assert lines[1].startswith("invalid: budget.partitions.state.eviction: 'reduce_candidates' is new")
    # Without --previous there is nothing to compare with: the file alone is valid.
    assert ctxeng("validate-policy", str(new)).returncode == 0
    # One record for each: valid.
    record = {"addresses": ["asm-1"], "failure": "f", "shows": "blocked: required_partition_missing", "new_failure_modes": "n",
              "cost": "c", "revocation": "r", "revoke_when": {"shows": "*: excluded ranking_lost", "at_least": 1, "of_last": 5}}
    body["upgrades"] = [
        {"mechanism": "cache.stable_prefix_sources.user_request", **record},
        {"mechanism": "budget.partitions.state.eviction", **record},
    ]
    new.write_text(json.dumps(body))  # JSON is YAML; safe_dump would anchor the shared list
    out = ctxeng("validate-policy", str(new), "--previous", str(old))
    assert out.returncode == 0 and out.stdout.startswith("valid: source-research/4 digest sha256:"), out.stderr
    # Going back: dropping the prefix source needs no record; an eviction rule changed (either way) does.
    back = ctxeng("validate-policy", str(old), "--previous", str(new))
    assert back.returncode == 2
    assert [ln.split(":")[1].strip() for ln in back.stderr.strip().splitlines()] == ["budget.partitions.state.eviction"]


def test_an_upgrade_record_must_name_a_mechanism_of_its_policy(example, tmp_path):
    body = _example_body((example / "policy.yaml").read_text())
    body["upgrades"] = [{"mechanism": "transforms.allowed.compress", "addresses": [], "failure": " ", "new_failure_modes": "n", "cost": "c", "revocation": "r"}]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(body))
    out = ctxeng("validate-policy", str(path))
    assert out.returncode == 2
    assert "invalid: upgrades[0].addresses: List should have at least 1 item" in out.stderr
    assert "invalid: upgrades[0].failure: must not be blank" in out.stderr
    body["upgrades"] = [{"mechanism": "transforms.allowed.compress", "addresses": ["a"], "failure": "f", "shows": "a: goal failed", "new_failure_modes": "n",
                         "cost": "c", "revocation": "r", "revoke_when": {"shows": "a: goal failed", "at_least": 1, "of_last": 1}, "owner": "x"}]
    path.write_text(yaml.safe_dump(body))
    out = ctxeng("validate-policy", str(path))
    assert "invalid: upgrades[0].owner: unknown field" in out.stderr
    body["upgrades"][0].pop("owner")
    path.write_text(yaml.safe_dump(body))
    out = ctxeng("validate-policy", str(path))
    assert out.stderr.startswith("invalid: upgrades[0].mechanism: 'transforms.allowed.compress' is not a mechanism of this policy")


def test_validate_policy_warns_on_stderr_for_each_authority_type_without_producers(example, tmp_path):
    out = ctxeng("validate-policy", str(example / "policy.yaml"))
    assert out.returncode == 0
    warned = [line.split(":", 2)[1].strip() for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert warned == ["trust.producers.system_policy", "trust.producers.user_request", "trust.producers.runtime_state"]
    body = _example_body((example / "policy.yaml").read_text())
    body["trust"]["producers"] = {"system_policy": ["runtime/v1"], "user_request": ["research-agent/v2"], "runtime_state": ["runtime/v1"]}
    (tmp_path / "bound.json").write_text(json.dumps(body))
    bound = ctxeng("validate-policy", str(tmp_path / "bound.json"))
    assert bound.returncode == 0 and "warning" not in bound.stderr


@pytest.mark.parametrize("name", ["request", "policy", "manifest"])
def test_schema_prints_the_json_schema_of_each_wire_format(name):
    out = ctxeng("schema", name)
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert schema["type"] == "object"
    top_level = {"request": "candidates", "policy": "budget", "manifest": "assembly"}[name]
    assert top_level in schema["properties"] and top_level in schema["required"]


PLAN_R5 = "Plan v5: cover all five repositories."


def _write_artifact(directory: Path, name: str, **fields) -> None:
    base = {"artifact_id": "plan-42", "revision": 5, "kind": "research_plan", "content": PLAN_R5,
            "writer": "artifact-store/v1", "scope": "tenant-x/project-y/task-1"}
    base.update(fields)
    (directory / name).write_text(json.dumps(base))


def _reinjecting_request(tmp_path: Path, revision: int = 5, content: str = PLAN_R5) -> Path:
    req = request(extra=[{
        "item_id": "plan", "kind": "research_plan", "source_type": "editable_project_file",
        "source_ref": {"artifact_id": "plan-42", "revision": revision}, "producer": "artifact-store/v1",
        "artifact_ref": {"artifact_id": "plan-42", "revision": revision}, "content_hash": sha(content),
        "revision": revision, "scope": "tenant-x/project-y/task-1", "intended_role": "untrusted_data",
    }])
    (tmp_path / "req.json").write_text(json.dumps(req))
    (tmp_path / "pol.json").write_text(json.dumps(policy()))
    return tmp_path


def test_artifacts_dir_re_injects_an_artifact_clause_by_clause(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    _write_artifact(store, "plan-5.json")
    d = _reinjecting_request(tmp_path)
    out = ctxeng("assemble", "--policy", str(d / "pol.json"), "--request", str(d / "req.json"), "--artifacts", str(store))
    assert out.returncode == 0, out.stderr
    manifest = json.loads(out.stdout)
    plan = next(i for i in manifest["included"] if i["item_id"] == "plan")
    assert set(plan["reinjection_checks"].values()) == {"passed"} and len(plan["reinjection_checks"]) == 11


def test_without_artifacts_dir_the_re_injected_item_cannot_be_loaded(tmp_path):
    d = _reinjecting_request(tmp_path)
    out = ctxeng("assemble", "--policy", str(d / "pol.json"), "--request", str(d / "req.json"))
    manifest = json.loads(out.stdout)
    plan = next(e for e in manifest["excluded"] if e["item_id"] == "plan")
    assert plan["reinjection_checks"]["object_identity"] == "failed"


def test_a_newer_stored_revision_replaces_the_one_the_request_names(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    old = "Plan v4: cover pi only."
    _write_artifact(store, "plan-4.json", revision=4, content=old)
    _write_artifact(store, "plan-5.json")
    d = _reinjecting_request(tmp_path, revision=4, content=old)
    out = ctxeng("assemble", "--policy", str(d / "pol.json"), "--request", str(d / "req.json"), "--artifacts", str(store))
    manifest = json.loads(out.stdout)
    plan = next(e for e in manifest["excluded"] if e["item_id"] == "plan")
    assert plan["reason"] == "expired" and "revision_replaced" in plan["detail"] and "revision 5 replaces it" in plan["detail"]
    assert manifest["lifecycle_events"][0]["emitted_by"] == "service"


def test_a_bad_artifact_file_exits_2_naming_the_file_and_field(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    _write_artifact(store, "plan-5.json", writer=None)
    _write_artifact(store, "plan-6.json", revision=6, content_hash="sha256:" + "0" * 64)
    d = _reinjecting_request(tmp_path)
    out = ctxeng("assemble", "--policy", str(d / "pol.json"), "--request", str(d / "req.json"), "--artifacts", str(store))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert lines[0].startswith("invalid: artifacts/plan-5.json: writer:")
    assert lines[1] == "invalid: artifacts/plan-6.json: content_hash: sha256:" + "0" * 64 + " does not match the content"


def test_the_cli_reads_json_within_the_same_bounds_as_the_api(tmp_path, example):
    """Nesting beyond 64 levels (before the parser recurses), NaN and unsafe integers: exit 2 with
    the field, never a RecursionError or a float the manifest cannot hold."""
    deep = "[" * 10_000 + "]" * 10_000
    cases = {
        "deep.json": ('{"run_id": ' + deep + "}", "body: nested 10001 levels deep, more than the limit 64"),
        "nan.json": ('{"run_id": "r", "relevance": NaN}', "relevance: NaN is not a JSON number"),
        "big.json": ('{"run_id": ' + "9" * 5000 + "}", "run_id: 999999999999... (5000 characters) is outside"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        out = ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(tmp_path / name))
        assert out.returncode == 2, name
        assert message in out.stderr and "Traceback" not in out.stderr, (name, out.stderr)


# --------------------------------------------------------------------------- starter policies


def test_policy_list_names_each_starter_with_what_it_is_for():
    out = ctxeng("policy", "list")
    assert out.returncode == 0
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["chat-agent", "coding-agent", "research-agent"]


def test_policy_init_writes_a_file_validate_policy_accepts(tmp_path):
    out = ctxeng_process("policy", "init", "chat-agent")
    assert out.returncode == 0, out.stderr
    path = tmp_path / "policy.yaml"
    path.write_text(out.stdout)
    checked = ctxeng("validate-policy", str(path))
    assert checked.returncode == 0
    assert checked.stdout.startswith("valid: chat-agent/1 digest sha256:")


def test_policy_init_takes_the_id_and_revision_to_write():
    out = ctxeng("policy", "init", "coding-agent", "--id", "acme-coder", "--revision", "3")
    assert out.returncode == 0
    header = yaml.safe_load(out.stdout)["policy"]
    assert header == {"id": "acme-coder", "revision": 3}
    assert "# " in out.stdout  # the comments are kept


def test_policy_init_of_an_unknown_starter_exits_2_with_the_known_names():
    out = ctxeng("policy", "init", "agent-smith")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == "invalid: no starter policy 'agent-smith'; known: chat-agent, coding-agent, research-agent\n"


def test_policy_init_refuses_a_revision_the_policy_would_refuse():
    out = ctxeng("policy", "init", "chat-agent", "--revision", "0")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == "invalid: policy.revision: Input should be greater than or equal to 1\n"


def test_usage_shows_the_actual_input_tokens_beside_the_estimate_and_keeps_the_sealed_manifest(example, tmp_path):
    """Seed §5, §10: the provider's actual input tokens stand beside the estimate once reported;
    usage is an appended record, so the sealed manifest file and every hash in it stay as they were."""
    m, shown = tmp_path / "manifest.json", tmp_path / "with-usage.json"
    assert ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"),
                  "--manifest-out", str(m)).returncode == 0
    sealed_bytes = m.read_bytes()
    sealed = json.loads(sealed_bytes)
    assert sealed["budget"]["actual_input_tokens"] is None
    out = ctxeng("usage", str(m), "--input-tokens", "3300", "--cached-tokens", "1024", "--manifest-out", str(shown))
    assert out.returncode == 0, out.stderr
    doc = json.loads(shown.read_text())
    assert doc["budget"]["actual_input_tokens"] == 3300
    assert doc["budget"]["payload_tokens"] == sealed["budget"]["payload_tokens"]
    assert doc["assembly"] == sealed["assembly"]  # hashes included
    assert m.read_bytes() == sealed_bytes
    assert f"estimated {sealed['budget']['payload_tokens']}, actual 3300" in out.stderr


def test_every_file_the_cli_writes_is_json_indented_by_two_spaces_with_a_final_newline(example, tmp_path):
    """What a reviewer reads and diffs: the manifest, the model input and the manifest with usage,
    each one value a line indented by two spaces, non-ASCII text as itself (not \\u escapes), and a
    final newline; the same layout whichever serializer wrote it."""
    m, i, shown = tmp_path / "manifest.json", tmp_path / "input.json", tmp_path / "with-usage.json"
    assert ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"),
                  "--manifest-out", str(m), "--input-out", str(i)).returncode == 0
    assert ctxeng("usage", str(m), "--input-tokens", "3300", "--manifest-out", str(shown)).returncode == 0
    for path in (m, i, shown):
        text = path.read_text(encoding="utf-8")
        assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n", path.name
        assert "\n  " in text, path.name


def test_usage_of_a_blocked_manifest_or_a_bad_count_is_refused_naming_the_field(example, tmp_path):
    m = tmp_path / "blocked.json"
    ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request-blocked.json"), "--manifest-out", str(m))
    out = ctxeng("usage", str(m), "--input-tokens", "10")
    assert out.returncode == 2 and "blocked assembly" in out.stderr
    ready = tmp_path / "ready.json"
    ctxeng("assemble", "--policy", str(example / "policy.yaml"), "--request", str(example / "request.json"), "--manifest-out", str(ready))
    out = ctxeng("usage", str(ready), "--input-tokens", "-1")
    assert out.returncode == 2 and "--input-tokens" in out.stderr
    out = ctxeng("usage", str(ready), "--input-tokens", "10", "--cached-tokens", "11")
    assert out.returncode == 2 and "--cached-tokens" in out.stderr
    (tmp_path / "bad.json").write_text("{}")
    out = ctxeng("usage", str(tmp_path / "bad.json"), "--input-tokens", "10")
    assert out.returncode == 2 and "manifest: assembly: field required" in out.stderr


def test_the_cli_pages_command_list_names_every_command_the_parser_has():
    from ctxeng.cli import build_parser

    docs = (REPO / "docs" / "cli.md").read_text()
    listed = docs.split("```sh\n", 1)[1].split("```", 1)[0]  # the page's first block: the command list
    parser = build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    missing = [name for name in commands.choices if f"python -m ctxeng {name} " not in listed]
    assert not missing, f"docs/cli.md's command list omits {missing}"
