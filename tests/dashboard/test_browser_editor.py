"""The policy editor and the people page in headless Debian Chromium (playwright), against a live
server: Validate shows the errors of bad YAML (htmx swaps the 422), the impact of the unsaved text
runs with its tables stacked, never overlapping, anchors land below any sticky bar, and a tenant
admin adds a person and issues a token shown once. Screenshots go to pytest's tmp_path.
"""

from __future__ import annotations

import pytest

from .test_browser_window import SIDEWAYS_JS

EDIT = "/policies/source-research/revisions/4/edit/"

pytestmark = pytest.mark.slow

# Elements fixed or sticky to the top of the viewport, and their bottom edge.
STICKY_BOTTOM_JS = """() => Math.max(0, ...[...document.querySelectorAll('body *')].filter(e => {
  const s = getComputedStyle(e); return (s.position === 'fixed' || s.position === 'sticky') && e.getBoundingClientRect().top <= 0.5
    && e.getBoundingClientRect().height > 0 && !e.closest('table');
}).map(e => e.getBoundingClientRect().bottom))"""


@pytest.fixture
def open_page(signed_in):
    """(example, `open_as(width, height, *, username)`: a logged-in page)."""
    return signed_in


def test_validate_shows_the_errors_of_bad_yaml(open_page, live_server, tmp_path):
    _, open_as = open_page
    page = open_as()
    page.goto(live_server.url + EDIT)
    text = page.input_value("#policy-body")
    page.fill("#policy-body", text + "admission: [unclosed\n")
    page.click("button[value=validate]")
    page.wait_for_selector("#validation .field-errors")
    shown = page.locator("#validation").inner_text()
    assert "malformed YAML" in shown and "nothing was saved" in shown
    page.locator("#validation").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "validate-bad-yaml.png"))
    # a revision number changed in the text is a field error at its line, not a crash
    page.fill("#policy-body", text.replace("revision: 4", "revision: 9", 1))
    page.click("button[value=validate]")
    page.locator("#validation code.path", has_text="body.policy.revision").wait_for()
    assert "does not match the revision in the URL 4" in page.locator("#validation").inner_text()
    page.fill("#policy-body", text)
    page.click("button[value=validate]")
    page.wait_for_selector("#validation p.ok")
    assert page.locator("#validation p.ok").inner_text().strip() == "The policy is valid."
    assert page.locator("#validation .field-errors").count() == 0
    # the worked example binds no producers: valid, with a warning per authority source type
    assert page.locator("#validation .field-warnings li").count() == 3
    # any other failed request says so instead of doing nothing (static/ctxeng/request-errors.js)
    assert page.locator("#request-error").is_hidden()
    page.evaluate("htmx.ajax('GET', '/policies/source-research/revisions/99/edit/', '#validation')")
    page.wait_for_selector("#request-error", state="visible")
    assert "The server answered 404 (it is not there any more)" in page.locator("#request-error").inner_text()
    assert page.locator("#validation p.ok").is_visible()  # the region kept its content


def test_the_impact_of_the_unsaved_text_runs_and_its_tables_do_not_overlap(open_page, live_server, tmp_path):
    _, open_as = open_page
    page = open_as()
    page.goto(live_server.url + EDIT)
    page.fill("#policy-body", page.input_value("#policy-body").replace("min_relevance: 0.9", "min_relevance: 0.85", 1))
    page.click("#run-impact")
    page.wait_for_selector("#impact .preview-status .badge:text-is('done')")  # the job ended (it polls till then)
    region = page.locator("#impact").inner_text()
    assert "the editor's unsaved text" in region and "web-context7-overview" in region
    boxes = page.evaluate("""() => [...document.querySelectorAll('#impact .impact-tables')].map(t =>
        [...t.children].map(c => { const r = c.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }))""")
    assert boxes
    for (l1, t1, r1, b1), (l2, t2, r2, b2) in boxes:
        assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, (boxes, "the two tables overlap")
    card = page.evaluate("() => document.querySelector('#impact').getBoundingClientRect().right")
    assert all(box[2] <= card + 0.5 for pair in boxes for box in pair)
    page.locator("#impact .impact-tables").first.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "impact-unsaved.png"))


def test_an_anchor_lands_below_any_sticky_bar(open_page, live_server, tmp_path):
    example, open_as = open_page
    page = open_as(height=600)
    manifest = f"/assemblies/{example['ready'].id}/"
    for url, target in (("/policies/source-research/#audit", "#audit"), ("/policies/source-research/#rev-3", "#rev-3"),
                        (manifest + "#lineage", "#lineage"), (manifest + "#serialized-input", "#serialized-input")):
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        top = page.evaluate(f"() => document.querySelector('{target}').getBoundingClientRect().top")
        assert top >= page.evaluate(STICKY_BOTTOM_JS), url
        assert top < 600, url
    page.screenshot(path=str(tmp_path / "anchor.png"))


def test_a_tenant_admin_adds_a_person_and_issues_a_token_shown_once(open_page, live_server, tmp_path):
    _, open_as = open_page
    page = open_as()
    page.click("nav.mainnav a:text('People')")
    page.wait_for_url(f"{live_server.url}/people/")
    page.fill("#id_new_username", "dana")
    page.check("#add-person input[name=roles][value=agent]")
    page.check("#add-person input[name=credential][value=none]")
    page.click("#add-person button[type=submit]")
    page.wait_for_selector("li.message.success")
    assert "Added dana in tenant-x." in page.locator("ul.messages").inner_text()
    row = page.locator("tr", has=page.locator("strong", has_text="dana"))
    assert "agent" in row.inner_text() and "reviewer" in row.inner_text()
    row.locator("button", has_text="Issue a token").click()
    page.wait_for_selector("#token-value")
    key = page.locator("#token-value").inner_text()
    assert len(key) == 40
    page.screenshot(path=str(tmp_path / "people-token.png"), full_page=True)
    page.goto(f"{live_server.url}/people/")
    assert key not in page.content()  # shown once
    row = page.locator("tr", has=page.locator("strong", has_text="dana"))
    row.locator("button", has_text="Revoke").click()
    page.wait_for_selector("li.message.success")
    assert "Revoked the API token of dana" in page.locator("ul.messages").inner_text()
    assert "token_revoked" in page.locator("#people-audit").inner_text()
    page.screenshot(path=str(tmp_path / "people.png"), full_page=True)


def test_restore_as_draft_creates_a_draft_equal_to_revision_n(open_page, live_server, tmp_path):
    import yaml

    from policies.models import PolicyRevision
    from policies.services import policy_revision_publish

    example, open_as = open_page
    policy_revision_publish(revision=example["draft"], user=example["owner"], note="floor 0.9")
    page = open_as(1280, 800)
    page.goto(f"{live_server.url}/policies/source-research/")
    page.locator("tr#rev-3 button", has_text="restore as draft").click()
    page.wait_for_url("**/policies/source-research/revisions/5/edit/")
    assert "restored from revision 3" in page.locator("ul.messages").inner_text()
    typed = yaml.safe_load(page.input_value("#policy-body"))
    three = PolicyRevision.objects.get(policy__policy_id="source-research", revision=3)
    written = yaml.safe_load(three.source_text)  # revision 3 as its editor wrote it
    assert typed["policy"]["revision"] == 5 and written["policy"]["revision"] == 3
    typed["policy"]["revision"] = 3
    assert typed == written
    five = PolicyRevision.objects.get(policy__policy_id="source-research", revision=5)
    assert five.status == "draft" and five.body["budget"] == three.body["budget"] and five.body["admission"] == three.body["admission"]
    # the gutter numbers every line of the text, and follows it as lines are added
    lines = page.input_value("#policy-body").rstrip("\n").count("\n") + 1
    assert page.locator(".code-editor .gutter span").count() == lines
    page.focus("#policy-body")
    page.keyboard.press("Control+End")
    page.keyboard.type("# one\n# two\n")
    assert page.locator(".code-editor .gutter span").count() == lines + 2
    page.screenshot(path=str(tmp_path / "restored-draft.png"))


def test_the_editor_at_390_px_shows_a_yaml_error_and_a_selection_error_without_sideways_scrolling(
        open_page, live_server, tmp_path):
    _, open_as = open_page
    page = open_as(390, 844)
    page.goto(live_server.url + EDIT)
    text = page.input_value("#policy-body")
    # a syntax error on a long unbroken line: its context is quoted under the message
    page.fill("#policy-body", text + "admission: [" + "unclosed_" * 30 + "\n")
    page.click("button[value=validate]")
    page.wait_for_selector("#validation .field-errors")
    assert "malformed YAML" in page.locator("#validation").inner_text()
    assert page.evaluate(SIDEWAYS_JS) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.locator("#validation").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "editor-error-390.png"))
    # the impact preview's selection form, with a field error shown under it
    page.fill("#policy-body", text)
    page.fill("#impact input[name=runs]", "run-not-of-this-policy-" + "x" * 60)
    page.click("#run-impact")
    page.wait_for_selector("#impact-selection-errors")
    assert "no step under this policy in run" in page.locator("#impact-selection-errors").inner_text()
    assert page.evaluate(SIDEWAYS_JS) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.locator("#impact").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "editor-impact-error-390.png"))


# For each line number in view: (its number, how far its middle is from the middle of that line of
# the text box, in px). The text's line N is at padding-top + (N - 1) * line-height - scrollTop.
ALIGNMENT_JS = """() => {
  const text = document.querySelector('#policy-body'), gutter = document.querySelector('.code-editor .gutter');
  const style = getComputedStyle(text), lh = parseFloat(style.lineHeight), box = text.getBoundingClientRect();
  const top = box.top + text.clientTop + parseFloat(style.paddingTop) - text.scrollTop;
  const g = gutter.getBoundingClientRect();
  return [...gutter.querySelectorAll('span')].map((s, i) => [i + 1, s.getBoundingClientRect()])
    .filter(([, r]) => r.top >= g.top && r.bottom <= g.bottom)
    .map(([n, r]) => [n, (r.top + r.bottom) / 2 - (top + (n - 0.5) * lh)]);
}"""


def test_the_line_numbers_stay_aligned_with_the_text_at_any_scroll(open_page, live_server, tmp_path):
    _, open_as = open_page
    page = open_as(1280, 720)
    page.goto(live_server.url + EDIT)
    text = page.input_value("#policy-body")
    # a long policy with a line wider than the box (a horizontal scrollbar) and a final line break
    longer = text.rstrip("\n") + "\n" + "".join(f"# note {n} " + ("x" * 300 if n == 5 else "") + "\n" for n in range(120))
    page.fill("#policy-body", longer)
    lines = longer.count("\n")
    assert page.locator(".code-editor .gutter span").count() == lines
    for where in ("el.scrollHeight / 3", "el.scrollHeight"):  # part way, then to the very end
        page.eval_on_selector("#policy-body", f"el => {{ el.scrollTop = {where}; }}")
        # the scroll event is handled before the frame after next is drawn
        page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        scrolled = page.evaluate("() => [document.querySelector('#policy-body').scrollTop,"
                                 " document.querySelector('.code-editor .gutter').scrollTop]")
        assert scrolled[0] > 0 and scrolled[1] == scrolled[0], (where, scrolled)
        shown = page.evaluate(ALIGNMENT_JS)
        assert len(shown) > 10, where
        assert all(abs(offset) <= 2 for _, offset in shown), (where, shown[:5])
    assert shown[-1][0] == lines  # at the end, the last number is in view beside the last line
    page.screenshot(path=str(tmp_path / "editor-scrolled-to-the-end.png"))
