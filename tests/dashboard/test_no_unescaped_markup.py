"""No template or view bypasses autoescaping outside a reviewed allow-list (issue 31).

Every string the dashboard shows may come from an agent's request (an item's id, kind, source_ref,
a tool's name, a policy's fields, a publish note), so every one must go through Django's escaping.
This test reads templates/ and the product's Python and refuses the ways around it: `|safe`,
`|safeseq`, `{% autoescape off %}`, `{% filter safe %}`, `mark_safe(`, `SafeString(`, and
`format_html(` / `format_html_join(` with a format string that is not a plain literal. A use that
is safe is listed, with the reason, in tests/dashboard/safe_markup_allowlist.txt.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = Path(__file__).with_name("safe_markup_allowlist.txt")
PRODUCT_PY = ("ctxeng", "manifests", "policies")
TEMPLATE_BYPASS = re.compile(r"\|\s*safe(seq)?\b|{%\s*autoescape\s+off\s*%}|{%\s*filter\s+[^%]*\bsafe\b")
PY_BYPASS = {"mark_safe", "SafeString", "SafeText", "mark_for_escaping"}
FORMATTERS = {"format_html", "format_html_join"}


def allowed() -> set[tuple[str, str]]:
    entries = set()
    for line in ALLOWLIST.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [part.strip() for part in line.split("|", 2)]
        assert len(parts) == 3 and all(parts), f"allow-list line needs 'path | line | reason': {line!r}"
        entries.add((parts[0], parts[1]))
    return entries


def template_bypasses(root: Path = REPO) -> list[tuple[str, str]]:
    found = []
    for path in sorted((root / "templates").rglob("*.html")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if TEMPLATE_BYPASS.search(line):
                found.append((str(path.relative_to(root)), line.strip()))
    return found


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def python_bypasses(source: str) -> list[int]:
    """Line numbers of calls that put text into markup unescaped."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _called(node)
        if name in PY_BYPASS:
            lines.append(node.lineno)
        elif name in FORMATTERS:
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                lines.append(node.lineno)
    return lines


def product_python_bypasses(root: Path = REPO) -> list[tuple[str, str]]:
    found = []
    for package in PRODUCT_PY:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text(encoding="utf-8")
            text = source.splitlines()
            found += [(str(path.relative_to(root)), text[n - 1].strip()) for n in python_bypasses(source)]
    return found


def test_no_template_or_view_bypasses_autoescaping_outside_the_allow_list():
    uses = template_bypasses() + product_python_bypasses()
    unreviewed = [f"{path}: {line}" for path, line in uses if (path, line) not in allowed()]
    assert not unreviewed, ("markup that skips autoescaping (escape it, or list it with a reason in "
                            f"{ALLOWLIST.name}):\n" + "\n".join(unreviewed))


def test_every_allow_listed_use_still_exists():
    uses = set(template_bypasses() + product_python_bypasses())
    stale = [f"{path} | {line}" for path, line in allowed() if (path, line) not in uses]
    assert not stale, "allow-list entries that no longer match a use (remove them):\n" + "\n".join(stale)


def test_the_check_notices_each_way_around_escaping(tmp_path):
    """The planted cases: each bypass is found, and the escaped forms are not."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "page.html").write_text(
        "{{ item.kind|safe }}\n{{ rows|safeseq }}\n{% autoescape off %}{{ note }}{% endautoescape %}\n"
        "{% filter force_escape|safe %}x{% endfilter %}\n{{ item.kind }}\n{{ note|escape }}\n{{ safety }}\n")
    assert [line for _, line in template_bypasses(tmp_path)] == [
        "{{ item.kind|safe }}", "{{ rows|safeseq }}", "{% autoescape off %}{{ note }}{% endautoescape %}",
        "{% filter force_escape|safe %}x{% endfilter %}"]
    source = (
        "from django.utils.html import format_html, format_html_join\n"
        "from django.utils.safestring import mark_safe\n"
        "a = mark_safe(note)\n"
        "b = format_html(f'<b>{kind}</b>')\n"
        "c = format_html('<b>' + kind + '</b>')\n"
        "d = format_html(template, kind)\n"
        "e = format_html('<b>{}</b>', kind)\n"
        "f = format_html_join('', '<i>{}</i>', ((k,) for k in kinds))\n"
    )
    assert python_bypasses(source) == [3, 4, 5, 6]
