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
    for node in target.deselect:  # each deselected test still exists, in a file the selection keeps
        path, _, test = node.partition("::")
        assert path not in target.ignore, f"{name}: {node} is deselected in a file the selection ignores"
        assert f"def {test}(" in (ROOT / path).read_text(), f"{name}: {node} does not exist"


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
    # Each mutant's tests import the product afresh, with the mutant active (not from a warmed server).
    assert (config["process_isolation"], config["forkserver_warmup"]) == ("forkserver", "none")


def test_the_project_pyproject_seen_by_a_workspace_has_no_mutmut_section_of_its_own():
    text = targets.project_pyproject_without_mutmut()
    assert "[tool.pytest.ini_options]" in text
    assert "tool" not in tomllib.loads(text) or "mutmut" not in tomllib.loads(text)["tool"]


def test_make_mutate_sample_runs_every_target_and_draws_a_new_seed_unless_given_one():
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^MUTATE_TARGETS := (.*)$", makefile, re.M)
    assert line, "Makefile: MUTATE_TARGETS"
    assert sorted(line.group(1).split()) == sorted([*targets.TARGETS, "templates"])
    assert sorted(targets.SAMPLED) == sorted([*targets.TARGETS, "templates"])
    # No default seed: a sample the tests were written against cannot be drawn again by accident.
    assert re.search(r"^MUTATE_SEED \?=\s*$", makefile, re.M), "MUTATE_SEED must default to empty"
    recipe = makefile[makefile.index("mutate-sample:"):].split("\n\n")[0]
    assert "$(if $(MUTATE_SEED),--seed $(MUTATE_SEED))" in recipe
    assert "tests.mutation.targets sample" in recipe
    assert len({targets.new_seed() for _ in range(6)}) > 1  # one in 10^30 to fail by chance


# Product files no target mutates, and why. Anything else with a function is in a target.
NOT_MUTATED = {
    "*/migrations/*": "schema migrations: generated, run once when a test database is built, before "
                      "any mutant is active",
}


def functions_in(path: str) -> int:
    tree = ast.parse((ROOT / path).read_text())
    return sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(tree))


def test_every_product_module_with_a_function_is_mutated_by_exactly_one_sampled_target():
    """mutmut mutates function bodies only, so a module without a function (an empty `__init__`,
    a URL conf, `wsgi.py`, the vocabulary's enums) has nothing to mutate; every other module of
    ctxeng/, manifests/ and policies/ is in one stratum of the whole-product sample."""
    owners: dict[str, list[str]] = {}
    for name in targets.TARGETS:
        for path in targets.mutated_files(name):
            owners.setdefault(path, []).append(name)
    missing, twice = [], []
    for path in python_files_under_sources():
        if any(fnmatch.fnmatch(path, pattern) for pattern in NOT_MUTATED):
            continue
        if not functions_in(path):
            continue
        if path not in owners:
            missing.append(path)
        elif len(owners[path]) > 1:
            twice.append(f"{path}: {owners[path]}")
    assert not missing, f"in no mutation target: {missing}"
    assert not twice, f"in more than one target (the sample's strata must not overlap): {twice}"


def test_the_walk_sees_the_modules_the_issue_named():
    """The walk above must see these (a SOURCE_PATHS typo would make it vacuous)."""
    files = python_files_under_sources()
    for path in ("manifests/views.py", "ctxeng/client.py", "ctxeng/cli.py", "ctxeng/telemetry.py",
                 "policies/views.py", "ctxeng/server/fair_queue.py", "ctxeng/server/login_throttle.py",
                 "ctxeng/server/rate_limits.py", "ctxeng/server/middleware.py", "ctxeng/server/rest.py",
                 "ctxeng/server/token_cache.py", "manifests/item_labels.py", "manifests/quotas.py",
                 "manifests/exports.py", "manifests/recovery.py", "manifests/tasks.py",
                 "manifests/templatetags/dashboard.py"):
        assert path in files, path


def product_names_used(text: str) -> set[str]:
    """The product's dotted names a test file mentions: `import a.b`, `from a import b` (as a.b),
    and any dotted name in a string (`"manifests.services.assembly_jobs_recover"` for a patch)."""
    found = set(re.findall(r"\b(?:ctxeng|manifests|policies)(?:\.\w+)*", text))
    # `manifests.tasks.run` (a patched function) names the module `manifests.tasks` too.
    names = {".".join(n.split(".")[:i]) for n in found for i in range(1, n.count(".") + 2)}
    for package, imported in re.findall(r"^\s*from\s+((?:ctxeng|manifests|policies)[\w.]*)\s+import\s+\(?([^)\n]*)",
                                        text, re.M):
        names.update(f"{package}.{n.strip().split(' ')[0]}" for n in imported.split(",") if n.strip())
    return names


def test_a_target_judges_with_every_test_file_that_imports_one_of_its_modules():
    """A test that imports a mutated module exercises it: it must be in the target's selection,
    unless it runs the product in another process (OUT_OF_PROCESS_TESTS, said in docs/mutation.md).
    Tests that reach a module through a URL are not found this way; every target selects every
    test of the test process for that reason, and this guards its ignore lists."""
    used = {p.relative_to(ROOT).as_posix(): product_names_used(p.read_text())
            for p in (ROOT / "tests").rglob("test_*.py") if "mutation" not in p.parts}
    missing = []
    for name, target in targets.TARGETS.items():
        selected = [t.rstrip("/") for t in target.tests]
        modules = {f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in targets.mutated_files(name)}
        for path, names in used.items():
            if not names & modules or path in targets.OUT_OF_PROCESS_TESTS or path in targets.BROWSER_TESTS:
                continue
            inside = any(path == t or path.startswith(t + "/") for t in selected)
            if not inside or any(path == i or path.startswith(i.rstrip("/") + "/") for i in target.ignore):
                missing.append(f"{name}: {path} imports {sorted(names & modules)}")
    assert not missing, "\n".join(missing)


def test_the_import_scan_sees_each_form_of_import():
    text = ("from manifests import services, selectors as s\nimport ctxeng.client\n"
            "from policies.api import x\nmock.patch('manifests.tasks.run')\n")
    names = product_names_used(text)
    assert {"manifests.services", "manifests.selectors", "ctxeng.client", "policies.api", "manifests.tasks"} <= names


def test_the_rewrite_leaves_no_module_level_decorator_and_defines_the_same_names():
    from tests.mutation.mutants import decorated_functions, undecorate

    assert decorated_functions("@d\ndef f(): pass\ndef g(): pass\n") == ["f"]
    rewritten = 0
    for name in targets.TARGETS:
        for path in targets.mutated_files(name):
            source = (ROOT / path).read_text()
            tree = ast.parse(source)  # the fast parser first: libcst (slow) only where there is a decorator
            if not any(isinstance(n, ast.FunctionDef) and n.decorator_list for n in tree.body):
                continue
            out = ast.parse(undecorate(source))
            assert not [n.name for n in out.body if isinstance(n, ast.FunctionDef) and n.decorator_list], path
            before = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            after = {n.name for n in out.body if isinstance(n, ast.FunctionDef)}
            assert before == after, path
            rewritten += 1
    assert rewritten >= 5  # the views, template tags, tasks at least


def test_a_rewritten_decorator_wraps_the_function_as_the_decorator_syntax_does():
    from tests.mutation.mutants import undecorate

    source = (
        "calls = []\n"
        "def tag(label):\n"
        "    def wrap(f):\n"
        "        calls.append(label)\n"
        "        return lambda *a: (label, f(*a))\n"
        "    return wrap\n\n"
        "@tag('outer')\n"
        "@tag('inner')\n"
        "def double(x):\n"
        "    return 2 * x\n"
    )
    out = undecorate(source)
    plain, rewritten = {}, {}
    exec(source, plain)
    exec(out, rewritten)
    assert "@tag" not in out
    assert rewritten["double"](4) == plain["double"](4) == ("outer", ("inner", 8))
    assert rewritten["calls"] == plain["calls"] == ["inner", "outer"]


def test_a_mutants_key_ignores_where_the_function_is_but_not_what_changed():
    from tests.mutation.mutants import diff_key

    diff = "--- a.py\n+++ a.py\n@@ -3,7 +3,7 @@\n x = 1\n-y = 2\n+y = 3\n"
    moved = diff.replace("@@ -3,7 +3,7 @@", "@@ -9,7 +9,7 @@")
    assert diff_key(diff) == diff_key(moved)
    assert diff_key(diff) != diff_key(diff.replace("+y = 3", "+y = 4"))
    assert diff_key(diff) != diff_key(diff.replace("a.py", "b.py"))


def test_the_sample_size_gives_five_points_at_ninety_percent_and_is_shared_in_proportion():
    # 1.96^2 * 0.9 * 0.1 / 0.05^2 = 138.3 (by hand)
    assert targets.sample_size(0.05, 0.9) == 139
    assert targets.sample_size(0.05, 0.8) == 246
    shares = targets.allocate({"a": 6000, "b": 3000, "c": 900, "d": 100}, 100)
    assert shares == {"a": 60, "b": 30, "c": 9, "d": 1}
    assert sum(targets.allocate({"a": 12616, "b": 2741, "c": 7}, 139).values()) == 139
    assert targets.allocate({"a": 1000, "b": 1}, 10)["b"] == 1  # every stratum is looked at


def test_the_stratified_estimate_weights_each_target_by_its_mutants():
    rows = [{"mutants": 900, "killed": 9, "survived": 1}, {"mutants": 100, "killed": 1, "survived": 1}]
    estimate, half = targets.stratified(rows)
    assert estimate == pytest.approx(0.9 * 0.9 + 0.1 * 0.5)
    assert half == pytest.approx(1.96 * (0.81 * 0.09 / 10 + 0.01 * 0.25 / 2) ** 0.5)


def test_a_mutant_no_test_reaches_counts_as_a_survivor():
    verdict = {"k": "killed", "s": "survived", "n": "not reached", "u": "not judged"}
    t = targets.tally(["k", "s", "n", "u"], verdict, {})
    assert (t["killed"], t["survived"], t["not_reached"], t["other"]) == (1, 2, 1, 1)


def _decorated_methods(path: str) -> list[tuple[ast.FunctionDef, ast.Call | None, set[str]]]:
    """Each decorated method of a module-level class of `path`, with the call its body is (when it
    is nothing but `return f(...)`, docstring aside), and the module's undecorated functions."""
    tree = ast.parse((ROOT / path).read_text())
    plain = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list}
    out = []
    for method in [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
                   if isinstance(m, ast.FunctionDef) and m.decorator_list]:
        body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        out.append((method, call if isinstance(call, ast.Call) else None, plain))
    return out


@pytest.mark.parametrize("path", ["manifests/api.py", "policies/api.py"])
def test_every_decorated_view_method_only_calls_a_module_level_function_mutmut_measures(path):
    """mutmut skips decorated functions, and every DRF view method carries `@extend_schema`: the
    method must hold nothing but a call of an undecorated module-level function."""
    methods = _decorated_methods(path)
    assert methods, f"{path}: no decorated view method found"
    for method, call, plain in methods:
        assert call is not None and isinstance(call.func, ast.Name) and call.func.id in plain, (
            f"{path}:{method.lineno} {method.name} holds logic mutmut cannot mutate; move it into a "
            "module-level function"
        )
        args = [a.id for a in call.args if isinstance(a, ast.Name)] + [k.arg for k in call.keywords]
        assert "self" not in args, f"{path}:{method.lineno}: pass the request and the path's values, not the view"


@pytest.mark.parametrize("path", ["ctxeng/engine/policy_models.py", "ctxeng/engine/request_models.py"])
def test_every_validator_of_the_wire_models_is_a_call_of_a_function_mutmut_measures(path):
    """The policy's and the request's validators (`@field_validator`, `@model_validator`), their
    serializer and properties are decorated methods, which mutmut skips: each holds one call of an
    undecorated module-level function, whose body mutmut mutates, and passes it only plain names
    and constants (a condition or an expression in the call would be logic left unmutated)."""
    methods = _decorated_methods(path)
    assert len(methods) >= 5, f"{path}: the validators were not found"
    for method, call, plain in methods:
        assert call is not None and isinstance(call.func, ast.Name) and call.func.id in plain, (
            f"{path}:{method.lineno} {method.name} holds logic mutmut cannot mutate; move it into a "
            "module-level function it calls"
        )
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            simple = isinstance(arg, ast.Name | ast.Constant) or (
                isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "tuple"
                and len(arg.args) == 1 and isinstance(arg.args[0], ast.Name))
            assert simple, f"{path}:{method.lineno} {method.name}: {ast.unparse(arg)} is logic in the decorated method"


def test_every_listed_equivalent_is_keyed_by_a_diff_and_names_a_module_of_some_target():
    modules = {m for name in targets.SAMPLED for m in targets.modules_of(name)}
    for key, (name, why) in targets.equivalents().items():
        assert re.fullmatch(r"[0-9a-f]{16}", key), f"{key}: the key is a diff_key (16 hex digits)"
        assert why, f"{name}: say why it is equivalent"
        module = name.split(".x", 1)[0] if "__mutmut_" in name else "templates"
        assert module in modules, f"{name}: {module} is mutated by no target"


def test_a_template_line_gives_one_mutant_per_decision():
    from tests.mutation.templates import line_mutants

    got = {kind: text for _, kind, text in line_mutants('{% if a and b %}{{ x|default:"-"|upper }}{% endif %}')}
    assert got == {
        "if-and-to-or": '{% if a or b %}{{ x|default:"-"|upper }}{% endif %}',
        "drop-default": "{% if a and b %}{{ x|upper }}{% endif %}",
        "drop-upper": '{% if a and b %}{{ x|default:"-" }}{% endif %}',
    }
    assert [k for _, k, _ in line_mutants("{% elif not row.ok %}")] == ["elif-drop-not"]
    assert [t for _, _, t in line_mutants("{% for r in rows reversed %}")] == ['{% for r in rows|slice:"1:" reversed %}']
    assert [t for _, _, t in line_mutants("{% if n == 1 %}")] == ["{% if not n == 1 %}"]


def test_every_template_mutant_is_a_template_django_can_compile():
    """A mutant that does not compile would be a kill the tests did not earn. A mutant changes one
    tag of a template that compiles, so the changed tag is compiled alone, closed, with the
    template's `{% load %}`s (the whole templates take 20 s more); a dropped filter leaves
    `{{ v }}`, always a variable tag."""
    from django.template import engines

    from tests.mutation.templates import TEMPLATES, generate

    engine = engines["django"]
    mutants = generate()
    assert len(mutants) > 500
    compiled = 0
    for name, (path, text) in mutants.items():
        line, column, kind = name.rsplit(":", 3)[1:]
        if kind.startswith("drop-"):
            continue
        mutated = text.split("\n")[int(line) - 1]
        start = mutated.rfind("{%", 0, int(column))
        tag = mutated[start: mutated.index("%}", start) + 2]
        loads = "".join(re.findall(r"\{% *load [^%]*%\}", (TEMPLATES / path).read_text()))
        opened = "{% if x %}" + tag if kind.startswith("elif") else tag
        closing = "{% endfor %}" if kind.startswith("for") else "{% endif %}"
        try:
            engine.from_string(loads + opened + closing)
        except Exception as error:  # noqa: BLE001 - any compile error is the finding
            pytest.fail(f"{name}: {tag}: {error}")
        compiled += 1
    assert compiled > 500


def test_the_template_compile_check_can_fail():
    from django.template import TemplateSyntaxError, engines

    with pytest.raises(TemplateSyntaxError):
        engines["django"].from_string("{% if not not %}{% endif %}")


def test_an_equivalent_whose_diff_is_gone_from_its_function_is_reported_stale(monkeypatch):
    from tests.mutation.mutants import diff_key

    now = {"manifests.api.x_f__mutmut_1": "--- manifests/api.py\n+++ manifests/api.py\n-    a = 1\n+    a = 2"}
    kept, gone = diff_key(now["manifests.api.x_f__mutmut_1"]), diff_key("--- manifests/api.py\n-    b\n+    c")
    monkeypatch.setattr(targets, "equivalents", lambda: {
        kept: ("manifests.api.x_f__mutmut_7", "renumbered, same diff"),
        gone: ("manifests.api.x_f__mutmut_1", "its line changed"),
    })
    monkeypatch.setattr(targets, "population", lambda name: list(now))
    monkeypatch.setattr(targets, "diffs", lambda name, names=None: {n: now[n] for n in (names or now)})
    assert targets.stale_equivalents(["api"]) == [f"{gone}  manifests.api.x_f__mutmut_1"]
    assert targets.stale_equivalents(["engine"]) == []  # not a module of the targets drawn
