"""A target's mutants without running a test: the source mutmut sees, the names, each mutant's diff and its key.

mutmut 3 mutates only undecorated functions (and those whose one decorator is `@staticmethod` or
`@classmethod`): it copies each mutated function under new names, decorators included, so a
decorated view, template tag or task would be registered once per mutant, and a decorator's
arguments run when the module is imported. Every Django view (`@require_GET`), template tag
(`@register.filter`) and task (`@app.task`) was therefore never mutated. `undecorate` rewrites each
*module-level* decorated function of a mutated file in the target's workspace as the same function
undecorated, followed by the assignment Python's decorator syntax stands for:

    @require_GET                       def run_page(request, run_id):
    def run_page(request, run_id):  ->     ...
        ...                            run_page = require_GET(run_page)

so mutmut mutates the body, and the trampoline it puts in its place (which keeps `__name__` and
`__wrapped__` with `functools.wraps`) is what the decorator wraps. The product's source is not
changed; the rewrite happens in the workspace's copy (tests/mutation/targets.py). Decorated
*methods* keep being skipped (`@property`, pydantic's validators, drf-spectacular's
`@extend_schema`): a class body cannot take the rewrite without renaming (a property's setter
shares its getter's name); docs/mutation.md says which lines that leaves.

`generate` computes a file's mutants in this process with mutmut's own generator (no test runs),
so a sample can be drawn over the whole product before any target's statistics exist; the names
are the ones `mutmut run` gives in the workspace. `diff_key` is the key of
tests/mutation/equivalents.txt: a hash of the mutant's unified diff (mutmut's own, function
against mutant) without its line numbers, so it survives edits elsewhere in the file and changes
when the mutated lines or their context change, unlike mutmut's per-function number.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import libcst as cst


def undecorate(source: str) -> str:
    """The module with each module-level decorated function as `def f` followed by `f = d(f)`."""
    module = cst.parse_module(source)
    if not any(isinstance(s, cst.FunctionDef) and s.decorators for s in module.body):
        return source
    body: list[cst.CSTNode] = []
    for statement in module.body:
        if not (isinstance(statement, cst.FunctionDef) and statement.decorators):
            body.append(statement)
            continue
        name = statement.name.value
        wrapped: cst.BaseExpression = cst.Name(name)
        for decorator in reversed(statement.decorators):
            wrapped = cst.Call(func=decorator.decorator, args=[cst.Arg(wrapped)])
        comments = [line for d in statement.decorators for line in d.leading_lines]
        body.append(statement.with_changes(decorators=[], leading_lines=[*statement.leading_lines, *comments]))
        body.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], wrapped)]))
    return module.with_changes(body=body).code


def decorated_functions(source: str) -> list[str]:
    """Names of the module-level functions of `source` that carry a decorator."""
    module = cst.parse_module(source)
    return [s.name.value for s in module.body if isinstance(s, cst.FunctionDef) and s.decorators]


@contextlib.contextmanager
def in_workspace(ws: Path):
    """mutmut reads its configuration from the working directory's pyproject.toml."""
    from mutmut import configuration

    before = Path.cwd()
    os.chdir(ws)
    configuration.reset_config()
    try:
        yield
    finally:
        configuration.reset_config()
        os.chdir(before)


def generate(ws: Path, path: str) -> tuple[list[str], str, dict[str, list[int]]]:
    """Every mutant of one file of the workspace (its rewritten copy): the names, the mutated module
    mutmut writes to `mutants/` (every mutant a function of it), and the lines each generated
    function occupies there (mutmut's own index, 1-based, inclusive). Must run inside
    `in_workspace(ws)`."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    mutated = mutate_file_contents(path, (ws / path).read_text())
    names = [get_mutant_name(Path(path), generated) for generated in mutated.mutant_names]
    spans = {name: [span.start, span.end] for name, span in mutated.line_span_by_function_name.items()}
    return names, mutated.code, spans


def diffs(path: str, code: str, spans: dict[str, list[int]], names: list[str]) -> dict[str, str]:
    """The unified diff of each named mutant of a mutated module, the text `mutmut show NAME` prints.
    Only the two functions of each mutant are parsed (the whole module of a large file holds
    hundreds of thousands of lines)."""
    from difflib import unified_diff

    from mutmut.mutation.diff_apply import parse_generated_function
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    lines = code.split("\n")

    def function(generated: str, name: str) -> str:
        start, end = spans[generated]
        _orig, class_name = orig_function_and_class_names_from_key(name)
        parsed = parse_generated_function("\n".join(lines[start - 1:end]) + "\n", name=generated,
                                          is_method=class_name is not None)
        plain = orig_function_and_class_names_from_key(name)[0].rpartition(".")[2]
        return cst.Module([parsed.with_changes(name=cst.Name(plain))]).code.strip()

    out, originals = {}, {}
    for name in names:
        generated = name.rpartition(".")[2]
        orig = generated.rpartition("__mutmut_")[0] + "__mutmut_orig"
        if orig not in originals:
            originals[orig] = function(orig, name)
        mutant = function(generated, name)
        out[name] = "\n".join(unified_diff(originals[orig].split("\n"), mutant.split("\n"),
                                           fromfile=path, tofile=path, lineterm=""))
    return out


def diff_key(diff: str) -> str:
    """A mutant's key: its file and changed lines with their context, line numbers left out."""
    lines = [line for line in diff.splitlines() if not line.startswith("@@")]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
