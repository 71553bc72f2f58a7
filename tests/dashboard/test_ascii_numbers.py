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
