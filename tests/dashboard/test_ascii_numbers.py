"""Every number a person or a client types into a URL or a form is ASCII digits (issue 51, N6).

`str.isdigit()` says yes to `²` (which `int()` refuses: a 500), `int()` and `float()` read `٣`
and `１` as 3 and 1, and Django's paginator reads `banana` as page 1. Each numeric query, form or
path parameter of the API and the dashboard answers a superscript, an Arabic-Indic and a
full-width digit with a 400 that names the parameter (a path segment with one matches no route:
404); never a 500, never a page chosen by a number nobody wrote.

The table below is the list of those parameters; a new one belongs in it.
"""

from __future__ import annotations

import html
from urllib.parse import quote

import pytest

from manifests.examples import example_json
from policies.models import ImpactPreview

ODD_DIGITS = ["²", "٣", "１"]  # SUPERSCRIPT TWO, ARABIC-INDIC DIGIT THREE, FULLWIDTH DIGIT ONE

POLICY = "/policies/source-research"

# (method, url with {value} where the number goes, the parameter named in the 400; a POST sends it as form data)
DASHBOARD = [
    ("get", "/runs/?page={value}", "page"),
    ("get", "/runs/run-42/?steps_page={value}", "steps_page"),
    ("get", "/runs/run-42/matrix/?steps={value}", "steps"),
    ("get", "/runs/run-42/matrix/?page={value}", "page"),
    ("get", "/assemblies/{ready}/?page={value}", "page"),
    ("get", "/assemblies/{ready}/tool_pairs/?page={value}", "page"),
    ("get", "/assemblies/{ready}/transforms/?page={value}", "page"),
    ("get", "/assemblies/{ready}/input/?page={value}", "page"),
    ("get", "/why/?q=plan&page={value}", "page"),
    ("get", "/why/?q=plan&group=none&page={value}", "page"),
    ("get", "/compare/?by=step&run=run-42&page={value}", "page"),
    ("get", "/usage/?page={value}", "page"),
    ("get", POLICY + "/diff/?from={value}", "from"),
    ("get", POLICY + "/diff/?to={value}", "to"),
    ("post", POLICY + "/revisions/new/", "from"),
]
REVISIONS = {"from", "to"}  # the example's policy has revisions 3 (published) and 4 (a draft)


def _url(template: str, example, value: str) -> str:
    return template.format(value=quote(value), ready=example["ready"].id)


@pytest.mark.parametrize("value", ODD_DIGITS)
@pytest.mark.parametrize(("method", "template", "name"), DASHBOARD)
def test_a_dashboard_number_in_other_digits_is_a_400_page_naming_it(owner_client, example, method, template, name,
                                                                    value):
    if method == "post":
        response = owner_client.post(_url(template, example, value), {name: value})
    else:
        response = owner_client.get(_url(template, example, value))
    assert response.status_code == 400, (template, value)
    assert f"{name}: expected a whole number from" in html.unescape(response.content.decode())


@pytest.mark.parametrize(("method", "template", "name"), DASHBOARD)
def test_the_same_parameter_in_ascii_digits_is_read(owner_client, example, method, template, name):
    """The anomaly check of the test above: each URL of its table answers when the digit is `1`,
    so the 400s come from the digit and not from a wrong URL."""
    good = "3" if name in REVISIONS else "1"
    if method == "post":
        response = owner_client.post(_url(template, example, good), {name: good})
        assert response.status_code == 302
    else:
        assert owner_client.get(_url(template, example, good)).status_code == 200


def test_banana_is_no_page_number_either(owner_client, example):
    response = owner_client.get("/runs/?page=banana")
    assert response.status_code == 400 and "page: expected a whole number from 1" in response.content.decode()


def test_a_page_beyond_the_last_is_the_last_page(owner_client, example):
    """A bookmarked page after rows went away: the last page, as before."""
    assert owner_client.get("/runs/?page=99999").status_code == 200


@pytest.mark.parametrize("value", ODD_DIGITS)
def test_the_impact_previews_limit_in_other_digits_is_named_and_nothing_runs(owner_client, example, value,
                                                                             django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(POLICY + "/revisions/4/impact/run/", {"limit": value})
    assert response.status_code == 400
    assert f"<code>limit</code>: “{value}” is not a whole number from 1 to 200" in html.unescape(response.content.decode())
    assert not ImpactPreview.objects.exists()


@pytest.mark.parametrize("value", ODD_DIGITS)
def test_a_compare_step_attempt_in_other_digits_is_a_400_naming_the_field(owner_client, example, value):
    response = owner_client.get(f"/compare/?run=run-42&a={quote('step-19#' + value)}&b={quote('step-20#2')}")
    assert response.status_code == 400
    body = html.unescape(response.content.decode())
    assert f"a: the attempt number after “#” is written with the digits 0-9, got “step-19#{value}”" in body


def test_a_compare_step_attempt_in_ascii_digits_is_that_attempt(owner_client, example):
    response = owner_client.get(f"/compare/?run=run-42&a={quote('step-19#1')}&b={quote('step-20#2')}")
    assert response.status_code == 200 and "the attempt number" not in response.content.decode()


@pytest.mark.parametrize("value", ODD_DIGITS + ["99999999999999999999999"])
def test_a_revision_number_in_a_path_in_other_digits_or_too_large_is_not_found(owner_client, example, value):
    for page in ("edit", "impact"):
        assert owner_client.get(f"{POLICY}/revisions/{quote(value)}/{page}/").status_code == 404


# --------------------------------------------------------------------------- the API


API = [
    ("/api/v1/assemblies/?limit={value}", "limit"),
    ("/api/v1/assemblies/?offset={value}", "offset"),
    ("/api/v1/artifacts/?limit={value}", "limit"),
    ("/api/v1/artifacts/?offset={value}", "offset"),
    ("/api/v1/items/task-goal/decisions/?limit={value}", "limit"),
    ("/api/v1/items/task-goal/decisions/?offset={value}", "offset"),
    ("/api/v1/assemblies/{ready}/?wait={value}", "wait"),
    ("/api/v1/policies/source-research/diff/?from={value}&to=3", "from"),
    ("/api/v1/policies/source-research/diff/?from=3&to={value}", "to"),
]


@pytest.fixture
def owner_api(api, example):
    return api(example["owner"])


@pytest.mark.parametrize("value", ODD_DIGITS)
@pytest.mark.parametrize(("template", "name"), API)
def test_an_api_number_in_other_digits_is_a_400_naming_it(owner_api, example, template, name, value):
    response = owner_api.get(_url(template, example, value))
    assert response.status_code == 400, (template, value)
    [message] = response.json()["errors"]
    assert message.startswith(f"{name}: expected a"), message


@pytest.mark.parametrize(("template", "name"), API)
def test_the_same_api_parameter_in_ascii_digits_is_read(owner_api, example, template, name):
    assert owner_api.get(_url(template, example, "3" if name in REVISIONS else "1")).status_code == 200


@pytest.mark.parametrize("value", ODD_DIGITS + ["99999999999999999999999"])
def test_an_api_revision_number_in_a_path_in_other_digits_or_too_large_is_not_found(owner_api, example, value):
    assert owner_api.get(f"/api/v1/policies/source-research/revisions/{quote(value)}/").status_code == 404


@pytest.mark.parametrize("value", ODD_DIGITS)
def test_a_number_in_a_json_body_written_in_other_digits_is_a_400_naming_its_field(owner_api, example, value):
    """A body's numbers are JSON numbers: the same digits as a string are refused, never read as a
    number. (An artifact's `revision` is a number or a label by design: `"²"` is a label.)"""
    usage = f"/api/v1/assemblies/{example['ready'].id}/usage/"
    for field in ("input_tokens", "cached_tokens", "output_tokens"):
        body = {"input_tokens": 10, "cached_tokens": 0, "output_tokens": 1, field: value}
        response = owner_api.post(usage, body, format="json")
        assert response.status_code == 400 and response.json()["errors"][0].startswith(f"{field}: "), field
    request = example_json("request.json")
    request["model"]["context_limit"] = value
    response = owner_api.post("/api/v1/assemblies/", request, format="json")
    assert response.status_code == 400 and response.json()["errors"][0].startswith("model.context_limit: ")
    # The anomaly check: the same report in numbers is taken, so the 400s came from the digits.
    assert owner_api.post(usage, {"input_tokens": 10, "cached_tokens": 0, "output_tokens": 1}, format="json").status_code < 300


# --------------------------------------------------------------------------- the run page, a preview's rows


# The run page's step window and the manifest sections' other pages (issue 51's audit: they were
# not in the table above). (url, the parameter, how its 400 starts after "name: ", the status with an ASCII 1.)
RUN_AND_INSPECTOR = [
    ("/runs/run-42/?steps={value}", "steps", "expected a step number or a range such as 120-140", 200),
    ("/runs/run-42/?from={value}", "from", "expected a whole number from", 200),
    ("/runs/run-42/?to={value}", "to", "expected a whole number from", 200),
    ("/runs/run-42/?step={value}", "step", "no step of this run is numbered or named", 302),
    # A section region reads both sections' pages from its query (its own is `?page=`, above).
    ("/assemblies/{ready}/transforms/?tool_pairs_page={value}", "tool_pairs_page", "expected a whole number from", 200),
    ("/assemblies/{ready}/tool_pairs/?transforms_page={value}", "transforms_page", "expected a whole number from", 200),
]


@pytest.mark.parametrize("value", ODD_DIGITS)
@pytest.mark.parametrize(("template", "name", "message", "ascii_status"), RUN_AND_INSPECTOR)
def test_a_run_page_or_section_number_in_other_digits_is_a_400_naming_it(owner_client, example, template, name,
                                                                           message, ascii_status, value):
    response = owner_client.get(_url(template, example, value))
    assert response.status_code == 400, (template, value)
    assert f"{name}: {message}" in html.unescape(response.content.decode()), template


@pytest.mark.parametrize(("template", "name", "message", "ascii_status"), RUN_AND_INSPECTOR)
def test_the_same_run_page_or_section_number_in_ascii_digits_is_read(owner_client, example, template, name,
                                                                      message, ascii_status):
    assert owner_client.get(_url(template, example, "1")).status_code == ascii_status, template


def test_an_impact_previews_page_number_in_other_digits_is_a_400_naming_it(owner_client, example,
                                                                           django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert owner_client.post(POLICY + "/revisions/4/impact/run/", {"limit": "5"}).status_code in (200, 302)
    preview = ImpactPreview.objects.get()
    url = f"{POLICY}/revisions/4/impact/{preview.id}/?page="
    assert owner_client.get(url + "1").status_code == 200
    for value in ODD_DIGITS:
        response = owner_client.get(url + quote(value))
        assert response.status_code == 400, value
        assert "page: expected a whole number from" in html.unescape(response.content.decode())


# --------------------------------------------------------------------------- every numeric parameter is listed

# Where the code reads a whole number from a request, found in its source: calls of these readers.
# A call naming its parameter by a literal is checked against the tables above; one naming it by a
# variable is listed here with the names it can read (its caller's literals are found themselves).
READERS = {"whole_number", "dashboard_int", "page_of", "query_int", "_page_param", "_step_number", "_wait_seconds"}
VIEW_MODULES = ["manifests/views.py", "manifests/api.py", "manifests/dashboard_selectors.py", "policies/views.py",
                "policies/api.py", "policies/dashboard_selectors.py", "ctxeng/accounts/views.py", "ctxeng/server/rest.py"]
READ_BY_A_VARIABLE = {
    "manifests/views.py:page_of": set(),  # its `name` argument: the callers' literals, or "page"
    "manifests/views.py:dashboard_int": set(),  # the same: a wrapper of whole_number for pages
    "ctxeng/server/rest.py:query_int": set(),  # the API's wrapper of whole_number
    "ctxeng/server/rest.py:get_limit": {"limit"},
    "ctxeng/server/rest.py:get_offset": {"offset"},
    "policies/api.py:policies_diff": {"from", "to"},
    "policies/views.py:_revision_param": {"from", "to"},
}


def _numeric_parameters() -> tuple[set[str], set[str]]:
    """(the parameter names the readers are called with, the call sites that name theirs by a variable)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    names: set[str] = set()
    indirect: set[str] = set()
    for module in VIEW_MODULES:
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for call in ast.walk(function):
                if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) in READERS):
                    continue
                reader = getattr(call.func, "id", getattr(call.func, "attr", None))
                named = {k.arg: k.value for k in call.keywords}.get("name")
                if named is None and reader == "query_int" and len(call.args) > 1:
                    named = call.args[1]
                if named is None and reader == "page_of":
                    names.add("page")
                elif isinstance(named, ast.Constant):
                    names.add(named.value)
                elif reader == "_step_number":
                    names.add("step")
                elif reader == "_wait_seconds":
                    names.add("wait")
                elif reader != "_page_param":
                    indirect.add(f"{module}:{function.name}")
                else:
                    names.add("page")
    return names, indirect


def test_every_numeric_parameter_of_the_api_and_the_dashboard_is_in_a_table_above():
    """A new `?n=` read by `whole_number`, `dashboard_int`, `page_of` or `query_int` fails here until
    it is added to a table (and so tested with `²`, `٣` and `１`)."""
    names, indirect = _numeric_parameters()
    assert indirect <= set(READ_BY_A_VARIABLE), sorted(indirect - set(READ_BY_A_VARIABLE))
    names |= set().union(*READ_BY_A_VARIABLE.values())
    tested = ({name for _, _, name in DASHBOARD} | {name for _, name in API}
              | {name for _, name, _, _ in RUN_AND_INSPECTOR} | {"limit", "page"})  # the preview's limit, its rows' page
    assert names - tested == set(), sorted(names - tested)
    assert len(names) >= 10  # the scan found the readers (an empty scan would pass the line above)
