"""The mutation targets' table (tests/mutation/targets.py) names files and tests that exist.

A renamed module or test file would otherwise leave a target that mutates nothing, or judges its
mutants with fewer tests than docs/mutation.md says, without any run failing.
"""

import ast
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


def test_make_mutate_sample_runs_every_target_and_draws_a_new_seed_unless_given_one():
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^MUTATE_TARGETS := (.*)$", makefile, re.M)
    assert line, "Makefile: MUTATE_TARGETS"
    assert sorted(line.group(1).split()) == sorted(targets.TARGETS)
    assert sorted(targets.SAMPLED) == sorted(targets.TARGETS)
    # No default seed: a sample the tests were written against cannot be drawn again by accident.
    assert re.search(r"^MUTATE_SEED \?=\s*$", makefile, re.M), "MUTATE_SEED must default to empty"
    recipe = makefile[makefile.index("mutate-sample:"):].split("\n\n")[0]
    assert "$(if $(MUTATE_SEED),--seed $(MUTATE_SEED))" in recipe
    assert "tests.mutation.targets sample" in recipe
    assert len({targets.new_seed() for _ in range(6)}) > 1  # one in 10^30 to fail by chance


def test_the_sample_covers_the_engine_the_sdk_its_adapters_the_services_selectors_and_dashboard_selectors():
    sampled = {f for name in targets.SAMPLED for f in targets.mutated_files(name)}
    for path in ("ctxeng/engine/budget.py", "ctxeng/engine/adapters.py", "ctxeng/engine/render.py",
                 "ctxeng/sdk/_session.py", "ctxeng/sdk/_messages.py", "ctxeng/sdk/langchain.py",
                 "ctxeng/sdk/openai_agents.py", "manifests/services.py", "policies/services.py",
                 "ctxeng/accounts/services.py", "manifests/selectors.py", "policies/selectors.py",
                 "ctxeng/accounts/selectors.py", "manifests/dashboard_selectors.py",
                 "policies/dashboard_selectors.py", "manifests/api.py", "policies/api.py"):
        assert path in sampled, f"{path} is in no sampled target"
    # The framework adapters are the `adapters` target's, not mutated twice under `sdk`.
    assert "ctxeng/sdk/langchain.py" not in targets.mutated_files("sdk")
    assert "ctxeng/sdk/langchain.py" in targets.mutated_files("adapters")


@pytest.mark.parametrize("path", ["manifests/api.py", "policies/api.py"])
def test_every_decorated_view_method_only_calls_a_module_level_function_mutmut_measures(path):
    """mutmut skips decorated functions, and every DRF view method carries `@extend_schema`: the
    method must hold nothing but a call of an undecorated module-level function."""
    tree = ast.parse((ROOT / path).read_text())
    plain = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list}
    methods = [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
               if isinstance(m, ast.FunctionDef) and m.decorator_list]
    assert methods, f"{path}: no decorated view method found"
    for method in methods:
        body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in plain, (
            f"{path}:{method.lineno} {method.name} holds logic mutmut cannot mutate; move it into a "
            "module-level function"
        )
        args = [a.id for a in call.args if isinstance(a, ast.Name)] + [k.arg for k in call.keywords]
        assert "self" not in args, f"{path}:{method.lineno}: pass the request and the path's values, not the view"


def test_every_listed_equivalent_mutant_names_a_file_of_some_target():
    mutated = {f for name in targets.TARGETS for f in targets.mutated_files(name)}
    modules = {f.removesuffix(".py").replace("/", ".") for f in mutated}
    for name, why in targets.equivalents().items():
        assert "__mutmut_" in name, name
        assert why, f"{name}: say why it is equivalent"
        module = name.split(".x", 1)[0]
        assert module in modules, f"{name}: {module} is mutated by no target"
