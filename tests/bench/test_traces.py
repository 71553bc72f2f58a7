"""The real agent traces the tests and benchmarks replay (bench.infra.TRACES) are the recorded ones:
the copy vendored in bench/traces/ and the folder actually read both hold exactly the files
bench/traces/SHA256SUMS lists, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bench.infra import TRACES, VENDORED_TRACES, traces_dir

SUMS = {line.split()[1]: line.split()[0] for line in (VENDORED_TRACES / "SHA256SUMS").read_text().splitlines() if line.strip()}


def test_the_sums_list_both_agents_runs_and_their_licences():
    assert {name.split("/")[0] for name in SUMS if "/" in name} == {"mini-swe-agent", "swe-agent"}
    assert {"mini-swe-agent/LICENSE.md", "swe-agent/LICENSE"} <= set(SUMS)
    assert sum(name.endswith((".json", ".traj")) for name in SUMS) == 5


@pytest.mark.parametrize("root", [VENDORED_TRACES, TRACES], ids=["vendored", "read"])
def test_each_trace_file_is_the_recorded_one(root: Path):
    for name, digest in SUMS.items():
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == digest, root / name


def test_the_folder_read_is_the_variables_else_the_shared_one_else_the_vendored_copy(monkeypatch, tmp_path):
    monkeypatch.setenv("CTXENG_TRACES", str(tmp_path))
    assert traces_dir() == tmp_path
    monkeypatch.delenv("CTXENG_TRACES")
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
    assert traces_dir() == (shared if (shared / "mini-swe-agent").is_dir() else VENDORED_TRACES)
    monkeypatch.setattr("bench.infra.ROOT", tmp_path / "clone")  # a clone with nothing beside it
    assert traces_dir() == VENDORED_TRACES
