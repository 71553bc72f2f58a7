"""A page region served two ways: the bare partial to htmx, a full page to everyone else.

Regions of the dashboard (the transforms and tool pairs of a manifest, an item's content or
excerpts, an impact preview) are partial templates that htmx swaps into their page. The same URLs
are also plain links a reviewer can open or share, so a request without the `HX-Request` header
gets the partial inside the layout (navigation, stylesheet) with a link back to the page it
belongs to. `Vary: HX-Request` keeps a cache from answering one kind of request with the other.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

REGION_PAGE = "ctxeng/region_page.html"


def render_region(request: HttpRequest, template: str, context: dict[str, Any], *, title: str,
                  back_url: str, back_label: str, status: int = 200) -> HttpResponse:
    """`template` alone for an htmx request; otherwise a page titled `title` that includes it."""
    if request.headers.get("HX-Request"):
        response = render(request, template, context, status=status)
    else:
        response = render(request, REGION_PAGE, {**context, "region_template": template, "region_title": title,
                                                 "region_back_url": back_url, "region_back_label": back_label},
                          status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response
