"""The mutation targets' table (tests/mutation/targets.py) names files and tests that exist.

A renamed module or test file would otherwise leave a target that mutates nothing, or judges its
mutants with fewer tests than docs/mutation.md says, without any run failing.
"""

import fnmatch
import re
import tomllib

import pytest

from tests.mutation import targets

ROOT = targets.ROOT


def python_files_under_sources() -> list[str]:
    files = []
    for source in targets.SOURCE_PATHS:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / source).rglob("*.py")]
    return files


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_every_glob_of_a_target_matches_a_python_file_mutmut_would_mutate(name):
    target = targets.TARGETS[name]
    files = python_files_under_sources()
    for pattern in target.mutate:
        matched = [
            f for f in files
            if fnmatch.fnmatch(f, pattern) and not any(fnmatch.fnmatch(f, d) for d in target.do_not_mutate)
        ]
        assert matched, f"{name}: {pattern} matches no file under {targets.SOURCE_PATHS}"


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_every_test_path_of_a_target_exists(name):
    target = targets.TARGETS[name]
    for path in target.tests + target.ignore:
        assert (ROOT / path).exists(), f"{name}: {path} does not exist"
    for path in target.ignore:
        assert any(path.startswith(t.rstrip("/") + "/") for t in target.tests), (
            f"{name}: {path} is ignored but lies under none of {target.tests}"
        )


@pytest.mark.parametrize("name", sorted(targets.TARGETS))
def test_the_workspace_configuration_of_a_target_is_its_row_of_the_table(name):
    target = targets.TARGETS[name]
    config = tomllib.loads(targets.mutmut_section(target))["tool"]["mutmut"]
    assert config["only_mutate"] == list(target.mutate)
    assert config["pytest_add_cli_args_test_selection"][: len(target.tests)] == list(target.tests)
    assert "manage.py" in config["also_copy"], "pytest-django finds the project by its manage.py"
    for entry in config["also_copy"]:
        assert (ROOT / entry).exists(), entry
    assert not set(config["also_copy"]) & set(targets.SOURCE_PATHS)


def test_the_project_pyproject_seen_by_a_workspace_has_no_mutmut_section_of_its_own():
    text = targets.project_pyproject_without_mutmut()
    assert "[tool.pytest.ini_options]" in text
    assert "tool" not in tomllib.loads(text) or "mutmut" not in tomllib.loads(text)["tool"]


def test_make_mutate_sample_runs_every_target_but_the_engine():
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^MUTATE_TARGETS := (.*)$", makefile, re.M)
    assert line, "Makefile: MUTATE_TARGETS"
    assert sorted(line.group(1).split()) == sorted(set(targets.TARGETS) - {"engine"})
