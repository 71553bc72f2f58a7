"""Request middleware that must not import DRF (it loads before the URL conf and DRF's settings)."""

from __future__ import annotations

from django.http import JsonResponse

NUL = "\x00"


class RejectNulBytesMiddleware:
    """400 for an /api/ URL whose path or query holds a NUL character.

    PostgreSQL cannot store or even compare text containing NUL, so such a value would reach
    the database as an error (500); refused up front, the error names the parameter.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):
            if NUL in request.path:
                return JsonResponse({"errors": ["path: contains a NUL character"]}, status=400)
            for name, values in request.GET.lists():
                if NUL in name or any(NUL in v for v in values):
                    return JsonResponse({"errors": [f"{name!r}: contains a NUL character"]}, status=400)
        return self.get_response(request)
