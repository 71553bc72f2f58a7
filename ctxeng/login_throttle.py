"""The login throttle's authentication backend: django-axes', first in AUTHENTICATION_BACKENDS.

Every password check that comes with a request (the login page, the admin's) goes through axes,
which refuses a locked-out username/address pair before the password is even compared. A check
without a request has no address to count against: Django's test client `login()` and scripts
calling `authenticate()` directly. Axes raises for those; here they fall through to the model
backend unthrottled, since no remote client is involved.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
