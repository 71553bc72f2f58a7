"""`make bench` (bench/run.py): a section that cannot run fails the run, naming the section.

The sections are stand-in modules registered for the test: one measures, one raises, one reports
`not run` itself (as bench/service.py does without its service); nothing is timed."""

from __future__ import annotations

import sys
import types

import pytest

from bench import run
from bench.timing import Row


def module(name: str, rows=None, error: Exception | None = None) -> types.ModuleType:
    mod = types.ModuleType(name)

    def measure(quick: bool):
        if error is not None:
            raise error
        return rows

    mod.run = measure
    return mod


@pytest.fixture
def sections(monkeypatch, tmp_path):
    def use(*specs: tuple[str, str, types.ModuleType]) -> None:
        for _, _, mod in specs:
            monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setattr(run, "SECTIONS", tuple((key, label, mod.__name__) for key, label, mod in specs))
        monkeypatch.setattr(run, "RESULTS", tmp_path)

    return use


def test_a_run_where_every_section_measured_exits_0(sections):
    sections(("1", "1 engine", module("bench_fake_ok", [Row("1 engine", "step", "3 ms")])))
    assert run.main(["--only", "1"]) == 0


def test_a_section_that_cannot_run_fails_the_run_naming_it(sections, capsys):
    sections(("1", "1 engine", module("bench_fake_ok", [Row("1 engine", "step", "3 ms")])),
             ("4", "4 service", module("bench_fake_service", [Row("4 service", "section", "not run: no redis-server")])),
             ("5", "5 dashboard", module("bench_fake_dashboard", error=RuntimeError("no database"))))
    assert run.main(["--only", "1,4,5"]) == 1
    err = capsys.readouterr().err
    assert "[bench] not run: 4 service: section: no redis-server" in err
    assert "[bench] not run: 5 dashboard: section: RuntimeError: no database" in err
    assert "not run: 1 engine" not in err
    assert (run.RESULTS / "latest.md").exists()  # the figures that were measured are still written
