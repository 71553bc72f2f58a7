"""The documentation site opened from disk (issue 53, item 4): `mkdocs build --strict` into a
temporary folder, `site/index.html` opened as a file:// URL in headless Chromium (the Debian
package driven by playwright, as tests/dashboard does; no browser is downloaded), every link of
the navigation followed — each opens a page, never a directory listing — and a search run from
file:// that lists results. Nothing is fetched from the network (no web fonts; material's offline
plugin runs search's worker in an iframe through the iframe-worker shim, vendored in
docs/assets/javascripts and named in `extra.polyfills`, so the plugin adds no unpkg URL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def page():
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.remote = []  # every request that left the disk
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else page.remote.append(r.url))
        yield page
        browser.close()


def test_every_navigation_link_opens_a_page_from_disk(site, page):
    page.goto((site / "index.html").as_uri())
    links = page.eval_on_selector_all("nav.md-nav--primary a.md-nav__link[href]", "els => els.map(e => e.href)")
    pages = sorted({link.split("#", 1)[0] for link in links if link.startswith("file:")})
    # mkdocs.yml's nav: every page it lists, and then some (the index); never a folder.
    assert len(pages) >= 10, pages
    for url in pages:
        assert url.endswith(".html"), f"{url}: a folder, which a browser shows as a directory listing"
        page.goto(url)
        assert not page.title().startswith("Index of"), f"{url}: a directory listing"
        assert page.locator("article.md-content__inner h1").count() >= 1, f"{url}: no page heading"
    assert page.remote == [], f"the site fetched from the network: {page.remote}"


def test_search_from_disk_lists_results(site, page):
    page.goto((site / "index.html").as_uri())
    page.keyboard.press("/")  # material's shortcut: opens the search box and focuses it
    page.keyboard.type("borrowing")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    assert page.locator(".md-search-result__item").count() > 0
    assert "Initializing search" not in page.inner_text(".md-search-result__meta")
