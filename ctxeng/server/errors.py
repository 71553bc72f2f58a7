"""Errors that services raise and the REST layer maps to a status code.

Services speak in these words (not HTTP); `ctxeng.server.rest.exception_handler` turns them into
`{"errors": [...]}` with 400 / 403 / 404 / 409. `Immutable` (a sealed record refusing a change) maps
to 409 too; it lives here, below every app, so that each app's sealed rows raise the same error.
"""

from __future__ import annotations


class Immutable(Exception):
    """Raised when code tries to change a sealed manifest, a stored artifact, a published revision or
    an audit event."""


class ServiceError(Exception):
    status_code = 400

    def __init__(self, *errors: str) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(errors))


class BadReference(ServiceError):
    """The body names something that does not exist (an unknown policy or revision)."""

    status_code = 400


class Forbidden(ServiceError):
    """The user lacks the tenant or the role for this operation."""

    status_code = 403


class NotFound(ServiceError):
    """Not there, or not visible to this user (the two are indistinguishable on purpose)."""

    status_code = 404


class Conflict(ServiceError):
    """The operation contradicts the stored state (a published revision, a reused idempotency key)."""

    status_code = 409


class QuotaExceeded(ServiceError):
    """A tenant's quota (settings CTXENG_QUOTA_*) refuses the write: 429 with Retry-After for a
    rate (it passes), 413 for stored bytes (it stays until something is purged)."""

    def __init__(self, message: str, *, status_code: int, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class OutcomeUnknown(ServiceError):
    """A write whose commit broke off, on a database that cannot be asked whether it applied: 504
    (the database did not answer in time) with Retry-After, never a 503 (which promises the
    request was not applied) nor a 500. A retry with the same Idempotency-Key is safe: it returns
    the job if the commit applied, and creates it once if not."""

    status_code = 504

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
