"""A tenant's usage against its quotas, as the people page shows it, without importing the manifests
app (the quotas count runs, jobs, artifacts and stored content, which sit above accounts in the
import contracts of pyproject.toml). `manifests.apps.ManifestsConfig.ready` registers
`manifests.quotas.tenant_usage` here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_tenant_usage: Callable[[Any], list] | None = None


def register(tenant_usage: Callable[[Any], list]) -> None:
    global _tenant_usage
    _tenant_usage = tenant_usage


def tenant_usage(tenant: Any) -> list:
    if _tenant_usage is None:
        raise ImproperlyConfigured("no quota usage is registered: the manifests app is not installed")
    return _tenant_usage(tenant)
