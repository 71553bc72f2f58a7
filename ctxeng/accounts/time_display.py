"""Where a page learns how its user wants timestamps shown, without a query per page.

The choice lives on the user's Profile (services.profile_time_display_set). A dashboard page reads
it from the session: it is copied there when the user logs in (`remember_on_login`, connected in
AccountsConfig.ready) and whenever they change it. A session from before this setting existed
reads the profile once and keeps the answer.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from .models import TimeDisplay
from .selectors import time_display_of

SESSION_TIME_DISPLAY = "ctxeng_time_display"


def remember_on_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_TIME_DISPLAY] = time_display_of(user)


def remember(request: HttpRequest, time_display: str) -> None:
    request.session[SESSION_TIME_DISPLAY] = time_display


def time_display_for(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not hasattr(request, "session"):
        return TimeDisplay.UTC
    chosen = request.session.get(SESSION_TIME_DISPLAY)
    if chosen not in TimeDisplay.values:
        chosen = time_display_of(user)
        request.session[SESSION_TIME_DISPLAY] = chosen
    return chosen
