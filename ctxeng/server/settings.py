"""Django settings for ctxeng, read from the environment.

Embedded defaults run on one machine with nothing but Python: a SQLite file under `var/` and
assembly jobs executed in-process right after the submitting transaction commits. Set
`DATABASE_URL` (PostgreSQL) and `REDIS_URL` (Celery broker) for production; see docs/service.md
for the full table. Every helper fails loudly on a value it cannot read, so a typo in the
environment stops the process at start instead of changing behaviour silently.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from ctxeng.content.objectstore import parse_content_store

BASE_DIR = Path(__file__).resolve().parents[2]


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name}: expected true/false, got {value!r}")


def envint(name: str, default: str) -> int:
    value = os.environ.get(name, default).strip()
    try:
        if not value.isascii():  # int() reads `٣` as 3
            raise ValueError(value)
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {value!r}") from None


def envfloat(name: str, default: str) -> float:
    value = os.environ.get(name, default).strip()
    try:
        if not value.isascii():
            raise ValueError(value)
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number, got {value!r}") from None


def envrate(name: str, default: str) -> str:
    """A rate, "N/s", "N/min", "N/hour" or "N/day" (ctxeng.server.rate_limits.parse_rate); empty: no limit."""
    value = os.environ.get(name, default).strip()
    if value and not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise ImproperlyConfigured(f"{name}: expected N/s, N/min, N/hour or N/day, got {value!r}")
    return value


def envlist(name: str, default: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, default).split(",") if part.strip()]


DEBUG = envbool("DJANGO_DEBUG", "true")
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false")
    SECRET_KEY = "insecure-development-key-only-for-DJANGO_DEBUG=true-on-one-machine"
ALLOWED_HOSTS = envlist("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = envlist("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "manifests",
    "policies",
    "ctxeng.audit",
    "ctxeng.accounts",
    "ctxeng.content",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside everything that may answer early (the control-character refusal, the login lockout),
    # so those HTML pages carry the policy too.
    "ctxeng.server.csp.ContentSecurityPolicyMiddleware",
    # Before anything reads a body (the control-character check and CSRF read forms): a chunked
    # body is otherwise read as empty.
    "ctxeng.server.middleware.ChunkedBodyMiddleware",
    # Before any body is parsed (and after the chunked one has its length): a large body waits for
    # a slot or is refused unread (ctxeng.server.large_requests).
    "ctxeng.server.large_requests.LargeRequestMiddleware",
    # Before WhiteNoise and the views: a NUL in a path reaches os.stat and the database otherwise.
    "ctxeng.server.middleware.RejectControlCharactersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # After CSRF, before any login view hashes a password (ctxeng.server.login_throttle).
    "ctxeng.server.login_throttle.LoginRateMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # DEBUG only: the styled 404/403/500 pages instead of Django's technical ones (inside
    # CommonMiddleware, so a missing slash still redirects; inside auth, so the page knows the user).
    "ctxeng.server.error_pages.DebugErrorPagesMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "ctxeng.server.urls"
WSGI_APPLICATION = "ctxeng.server.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "ctxeng.accounts.context_processors.people_link",
                "ctxeng.accounts.context_processors.tenant_link",
                "ctxeng.accounts.context_processors.time_display",
            ],
        },
    },
]

# --------------------------------------------------------------------------- database

VAR_DIR = Path(os.environ.get("CTXENG_VAR_DIR", str(BASE_DIR / "var")))
DATABASE_URL = os.environ.get("DATABASE_URL", "") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("CTXENG_DB_CONN_MAX_AGE", "0"))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web requests, the in-process runner and worker heartbeats write concurrently: wait, don't fail.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA page_size=16384; PRAGMA journal_mode=WAL;"}
    )
    if DATABASES["default"]["NAME"] != ":memory:":
        Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --------------------------------------------------------------------------- content store

# Where content bodies live (ctxeng.content): "db" keeps them in the database; "s3://bucket/prefix"
# puts them in an S3-compatible object store, each tenant's under <prefix>/tenant-<pk>/.
# CTXENG_S3_ENDPOINT_URL points at a store other than AWS (MinIO, a local server). The AWS_* keys
# left empty fall back to boto3's own chain (instance role, ~/.aws).
CTXENG_CONTENT_STORE = os.environ.get("CTXENG_CONTENT_STORE", "db").strip() or "db"
parse_content_store(CTXENG_CONTENT_STORE)  # a malformed value stops the process here
CTXENG_S3_ENDPOINT_URL = os.environ.get("CTXENG_S3_ENDPOINT_URL", "").strip()
if CTXENG_S3_ENDPOINT_URL and not re.fullmatch(r"https?://[^/\s]+/?", CTXENG_S3_ENDPOINT_URL):
    raise ImproperlyConfigured(f"CTXENG_S3_ENDPOINT_URL: expected http(s)://host[:port], got {CTXENG_S3_ENDPOINT_URL!r}")
AWS_ACCESS_KEY_ID = os.environ.get("AWS_ACCESS_KEY_ID", "")
AWS_SECRET_ACCESS_KEY = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
AWS_DEFAULT_REGION = os.environ.get("AWS_DEFAULT_REGION", "")
# An object no row names is deleted by purge_content once this old (a writer uploads before its
# transaction commits; a younger orphan may still be committed).
CTXENG_CONTENT_ORPHAN_GRACE_SECONDS = envint("CTXENG_CONTENT_ORPHAN_GRACE_SECONDS", "3600")
# A worker keeps the blobs of the requests it read, decoded, up to this many MB of blob bytes (the
# agent's next step repeats most of them); each is still confirmed present in the store. 0: off.
CTXENG_CONTENT_READ_MEMO_MB = envfloat("CTXENG_CONTENT_READ_MEMO_MB", "32")
if CTXENG_CONTENT_READ_MEMO_MB < 0:
    raise ImproperlyConfigured("CTXENG_CONTENT_READ_MEMO_MB: expected 0 or more")

# --------------------------------------------------------------------------- auth, i18n, static

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

# Login throttling (django-axes): after CTXENG_LOGIN_FAILURE_LIMIT wrong passwords for one username
# from one address, that pair is locked out for CTXENG_LOGIN_LOCKOUT_MINUTES (every attempt gets
# the lockout page, 429), and an audit event is written. Counting the pair rather than the
# username alone keeps an attacker from locking a user out everywhere. A success resets the count.
# API tokens never pass through a password check, so agents are not affected.
AUTHENTICATION_BACKENDS = [
    "ctxeng.server.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("CTXENG_LOGIN_FAILURE_LIMIT", "5")
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured(f"CTXENG_LOGIN_FAILURE_LIMIT: expected at least 1, got {AXES_FAILURE_LIMIT}")
AXES_COOLOFF_TIME = timedelta(minutes=envfloat("CTXENG_LOGIN_LOCKOUT_MINUTES", "15"))
if AXES_COOLOFF_TIME <= timedelta(0):
    raise ImproperlyConfigured("CTXENG_LOGIN_LOCKOUT_MINUTES: expected a positive number of minutes")
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "ctxeng.server.login_throttle.client_address"
# Before any of that, and before a password is hashed: login attempts per client address, per
# username over every address and over everything ("N/s", "N/min", "N/hour", "N/day"; empty: no
# limit), counted in the "throttle" cache (Redis with REDIS_URL); beyond one, 429 with Retry-After.
# An address a username logged in from in the last CTXENG_LOGIN_KNOWN_ADDRESS_DAYS (0: none is
# remembered) counts its attempts for that username in its own window only, so no flood from
# elsewhere refuses that user there (ctxeng.server.login_throttle).
CTXENG_LOGIN_RATE_PER_ADDRESS = envrate("CTXENG_LOGIN_RATE_PER_ADDRESS", "10/min")
CTXENG_LOGIN_RATE_PER_USERNAME = envrate("CTXENG_LOGIN_RATE_PER_USERNAME", "10/min")
CTXENG_LOGIN_RATE_TOTAL = envrate("CTXENG_LOGIN_RATE_TOTAL", "300/min")
CTXENG_LOGIN_KNOWN_ADDRESS_DAYS = envfloat("CTXENG_LOGIN_KNOWN_ADDRESS_DAYS", "30")
if CTXENG_LOGIN_KNOWN_ADDRESS_DAYS < 0:
    raise ImproperlyConfigured(f"CTXENG_LOGIN_KNOWN_ADDRESS_DAYS: expected 0 or more, got {CTXENG_LOGIN_KNOWN_ADDRESS_DAYS}")
# Trusted proxies in front of the app that append the client's address to X-Forwarded-For
# (deploy/nginx.conf: 1); 0 counts REMOTE_ADDR. Set it only when every request comes through them.
CTXENG_PROXY_HOPS = envint("CTXENG_PROXY_HOPS", "0")
if CTXENG_PROXY_HOPS < 0:
    raise ImproperlyConfigured(f"CTXENG_PROXY_HOPS: expected 0 or more, got {CTXENG_PROXY_HOPS}")
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "ctxeng/lockout.html"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = DEBUG  # serve straight from static/ in development, no collectstatic
if DEBUG:
    # WhiteNoise warns at every start when STATIC_ROOT is missing (it exists after collectstatic).
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --------------------------------------------------------------------------- production hardening

if not DEBUG:
    SESSION_COOKIE_SECURE = envbool("DJANGO_SECURE_COOKIES", "true")
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_SSL_REDIRECT = envbool("DJANGO_SECURE_SSL_REDIRECT", "true")
    SECURE_HSTS_SECONDS = envint("DJANGO_SECURE_HSTS_SECONDS", "31536000")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto=https` -> ("HTTP_X_FORWARDED_PROTO", "https"); unset -> None.

    Only set it behind a proxy that overwrites the header: a client that can send it itself
    could otherwise make plain HTTP look secure.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    header, _, expected = value.partition("=")
    header, expected = header.strip(), (expected.strip() or "https")
    if not header or not all(c.isalnum() or c in "-_" for c in header):
        raise ImproperlyConfigured(f"{name}: expected HEADER=VALUE such as X-Forwarded-Proto=https, got {value!r}")
    return "HTTP_" + header.upper().replace("-", "_"), expected


SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")

# Content-Security-Policy on every HTML response (ctxeng.server.csp): scripts and styles only from this
# origin, no inline script or style, no plugins, no framing. The dashboard needs nothing more
# (htmx is a static file; its injected indicator style is switched off in base.html).
CTXENG_CSP = os.environ.get(
    "CTXENG_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
).strip()

# --------------------------------------------------------------------------- REST API

# Bodies above this are refused with 413 before they are parsed (one request carries up to
# 20,000 candidates with inline content).
CTXENG_MAX_REQUEST_BYTES = envint("CTXENG_MAX_REQUEST_BYTES", str(16 * 1024 * 1024))
# Per-tenant quotas (manifests.quotas; 0: no limit): rates over a sliding window (429 with
# Retry-After beyond them) and stored bytes (413 for a write that would pass them).
CTXENG_QUOTA_JOBS_PER_MINUTE = envint("CTXENG_QUOTA_JOBS_PER_MINUTE", "6000")
CTXENG_QUOTA_RUNS_PER_DAY = envint("CTXENG_QUOTA_RUNS_PER_DAY", "100000")
CTXENG_QUOTA_ARTIFACT_BYTES = envint("CTXENG_QUOTA_ARTIFACT_BYTES", str(1024**3))
CTXENG_QUOTA_CONTENT_BYTES = envint("CTXENG_QUOTA_CONTENT_BYTES", str(10 * 1024**3))
# A usage report is used for calibration only when its actual input tokens are within this band
# of the assembly's estimate (manifests.selectors.usage_in_band); one outside is stored and shown
# for review, never calibrated on, so the factor stays within the band whatever an agent reports.
# Usage reports come from the agent, not from the provider: what any set of them can do to the
# other runs of the tenant is bounded. The factor applied to a job is held within this share of
# the factor of the tenant's newest manifest for that model sealed at least an hour before (the
# policy's default factor when there is none): up by at most x(1 + step), down by at most
# /(1 + step) per hour (manifests.selectors.model_calibration). 0.1: 20 reports at 1.99x their
# estimate cut the usable input by at most 9% in an hour (they cut it by 42% at once before).
CTXENG_CALIBRATION_STEP_PER_HOUR = envfloat("CTXENG_CALIBRATION_STEP_PER_HOUR", "0.1")
if not 0 <= CTXENG_CALIBRATION_STEP_PER_HOUR <= 3:
    raise ImproperlyConfigured(f"CTXENG_CALIBRATION_STEP_PER_HOUR: expected 0 to 3, got {CTXENG_CALIBRATION_STEP_PER_HOUR}")
CTXENG_USAGE_RATIO_MIN = envfloat("CTXENG_USAGE_RATIO_MIN", "0.5")
CTXENG_USAGE_RATIO_MAX = envfloat("CTXENG_USAGE_RATIO_MAX", "2.0")
if not 0 < CTXENG_USAGE_RATIO_MIN <= 1 <= CTXENG_USAGE_RATIO_MAX <= 4:
    raise ImproperlyConfigured("CTXENG_USAGE_RATIO_MIN/MAX: expected 0 < min <= 1 <= max <= 4 (4: the largest factor), "
                               f"got {CTXENG_USAGE_RATIO_MIN} and {CTXENG_USAGE_RATIO_MAX}")
# The Retry-After of a 503 while the database cannot be reached (ctxeng.server.views.service_unavailable).
CTXENG_OUTAGE_RETRY_AFTER_SECONDS = envint("CTXENG_OUTAGE_RETRY_AFTER_SECONDS", "5")
DATA_UPLOAD_MAX_MEMORY_SIZE = CTXENG_MAX_REQUEST_BYTES

# Requests per token-authenticated user ("600/min", "20/s"; empty: no limit), counted in the
# "throttle" cache: Redis when REDIS_URL is set (shared by every web process), else this process.
CTXENG_THROTTLE_AGENT = envrate("CTXENG_THROTTLE_AGENT", "600/min")
# Long-polls (`GET assemblies/{id}/?wait=S`) held at once, across every web process (counted in
# the "throttle" cache: Redis with REDIS_URL, else this process) and per tenant: each holds a sync
# gunicorn worker, so the total stays below the workers (the README's layout runs 4: 3 leaves one
# for /healthz and everything else). Beyond either, the job is answered at once as it is, with
# Retry-After (manifests.api). 0: every wait is answered at once. A tenant's share, by default,
# is under half of what is left after one slot: any two tenants together leave a slot for a third
# (with 3 and 2 two tenants held all three and a third polled every 2 s: issue 51, N7).
CTXENG_LONGPOLL_MAX_TOTAL = envint("CTXENG_LONGPOLL_MAX_TOTAL", "3")
CTXENG_LONGPOLL_MAX_PER_TENANT = envint("CTXENG_LONGPOLL_MAX_PER_TENANT",
                                        str(max(1, (CTXENG_LONGPOLL_MAX_TOTAL - 1) // 2)))
for _name in ("CTXENG_LONGPOLL_MAX_TOTAL", "CTXENG_LONGPOLL_MAX_PER_TENANT"):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name}: expected a number of long-polls >= 0, got {globals()[_name]}")
# Requests with a body over CTXENG_LARGE_BODY_BYTES (0: none is large) in progress at once, over
# every web process and per tenant (per client address without a token), counted like the
# long-polls: each holds a sync worker for its parse and store, and six 4 MB submits from one
# token held all four workers (issue 51, N4). Beyond its tenant's bound a large request is a 429,
# beyond the total a 503, both with Retry-After, before its body is read (ctxeng.server.large_requests).
# A slot is a lease its request renews; one a killed worker left ends within the lease.
CTXENG_LARGE_BODY_BYTES = envint("CTXENG_LARGE_BODY_BYTES", str(1024 * 1024))
CTXENG_LARGE_REQUESTS_MAX_TOTAL = envint("CTXENG_LARGE_REQUESTS_MAX_TOTAL", "2")
CTXENG_LARGE_REQUESTS_MAX_PER_TENANT = envint("CTXENG_LARGE_REQUESTS_MAX_PER_TENANT", "1")
CTXENG_LARGE_REQUEST_LEASE_SECONDS = envfloat("CTXENG_LARGE_REQUEST_LEASE_SECONDS", "10")
for _name in ("CTXENG_LARGE_BODY_BYTES", "CTXENG_LARGE_REQUESTS_MAX_TOTAL", "CTXENG_LARGE_REQUESTS_MAX_PER_TENANT"):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name}: expected 0 or more, got {globals()[_name]}")
if CTXENG_LARGE_REQUEST_LEASE_SECONDS <= 0:
    raise ImproperlyConfigured("CTXENG_LARGE_REQUEST_LEASE_SECONDS: expected a positive number of seconds")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": os.environ["REDIS_URL"],
         "KEY_PREFIX": "ctxeng:throttle"}
        if os.environ.get("REDIS_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "ctxeng-throttle"}
    ),
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["ctxeng.server.rest.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "ctxeng.server.rest.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "ctxeng.server.rest.BoundedPagination",
    "PAGE_SIZE": 100,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_THROTTLE_CLASSES": ["ctxeng.server.rest.AgentTokenThrottle"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ctxeng API",
    "DESCRIPTION": "Submit context assemblies, fetch sealed manifests and model input, version policies.",
    "VERSION": "1",
    # The engine's pydantic models publish JSON Schema 2020-12 (`exclusiveMinimum: 0`, `type: null`),
    # which is OpenAPI 3.1's dialect; declared as 3.0 the request schemas were invalid.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's assets come vendored from drf-spectacular-sidecar: the docs page needs no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Every operation documents the error responses it can give ({"errors": [...]}).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ctxeng.server.openapi.add_error_responses",
        "ctxeng.server.openapi.add_links",
        "ctxeng.server.openapi.declare_id_rules",
    ],
}

# --------------------------------------------------------------------------- jobs

# Unset: jobs run in this process right after the submitting transaction commits.
REDIS_URL = os.environ.get("REDIS_URL", "")
CTXENG_JOBS_INLINE = not REDIS_URL
# Where reviewers reach the dashboard (https://ctxeng.example.com): the absolute link in each
# assembly's trace span (ctxeng.telemetry). Unset: the span carries the path alone.
CTXENG_PUBLIC_URL = os.environ.get("CTXENG_PUBLIC_URL", "").rstrip("/")

CTXENG_MAX_ATTEMPTS = envint("CTXENG_MAX_ATTEMPTS", "3")
# A running job writes heartbeat_at every CTXENG_HEARTBEAT_SECONDS; a job whose heartbeat is older
# than CTXENG_STALE_AFTER_SECONDS is presumed lost with its worker and is requeued (or failed once
# it has used CTXENG_MAX_ATTEMPTS). Every worker sweeps at start and every CTXENG_SWEEP_SECONDS, and so
# does the sweeper process (`manage.py recover_jobs --every`), which needs no live worker.
CTXENG_HEARTBEAT_SECONDS = envfloat("CTXENG_HEARTBEAT_SECONDS", "10")
CTXENG_STALE_AFTER_SECONDS = envfloat("CTXENG_STALE_AFTER_SECONDS", "40")
CTXENG_SWEEP_SECONDS = envfloat("CTXENG_SWEEP_SECONDS", "15")
# A queued job whose message has not been picked up this long is enqueued again (a message
# prefetched by a worker that then died stays invisible in Redis until its visibility timeout).
CTXENG_REQUEUE_QUEUED_AFTER_SECONDS = envfloat("CTXENG_REQUEUE_QUEUED_AFTER_SECONDS", "60")
CTXENG_JOB_SOFT_TIME_LIMIT = envint("CTXENG_JOB_SOFT_TIME_LIMIT", "240")
CTXENG_JOB_TIME_LIMIT = envint("CTXENG_JOB_TIME_LIMIT", "300")
if CTXENG_JOB_SOFT_TIME_LIMIT >= CTXENG_JOB_TIME_LIMIT:
    raise ImproperlyConfigured("CTXENG_JOB_SOFT_TIME_LIMIT must be below CTXENG_JOB_TIME_LIMIT")
# The impact preview (a job) stops starting new replays after this many seconds and says so.
CTXENG_IMPACT_TIME_LIMIT_SECONDS = envfloat("CTXENG_IMPACT_TIME_LIMIT_SECONDS", "120")
if CTXENG_IMPACT_TIME_LIMIT_SECONDS <= 0:
    raise ImproperlyConfigured("CTXENG_IMPACT_TIME_LIMIT_SECONDS: expected a positive number of seconds")
# Fair dispatch (ctxeng.server.fair_queue): a worker takes the queued job or preview of the next
# tenant in turn, round-robin over the tenants with work, instead of the oldest message; 0: first
# in, first out (one tenant's backlog delays every other tenant's jobs). A tenant may hold at most
# CTXENG_FAIR_TENANT_MAX_RUNNING workers at once (0: no cap; a cap leaves workers idle when only
# that tenant has work); a turn that finds every waiting tenant at its cap is requeued after
# CTXENG_FAIR_REQUEUE_SECONDS. A worker's hold on a slot is a lease it renews; one not renewed
# for CTXENG_FAIR_LEASE_SECONDS (a killed worker) frees the slot and queues its entry again.
CTXENG_FAIR_DISPATCH = envbool("CTXENG_FAIR_DISPATCH", "1")
CTXENG_FAIR_TENANT_MAX_RUNNING = envint("CTXENG_FAIR_TENANT_MAX_RUNNING", "0")
CTXENG_FAIR_REQUEUE_SECONDS = envfloat("CTXENG_FAIR_REQUEUE_SECONDS", "1")
CTXENG_FAIR_LEASE_SECONDS = envfloat("CTXENG_FAIR_LEASE_SECONDS", "40")
# Impact previews a tenant may have on workers at once (0: no bound); its other previews wait
# while its jobs and every other tenant's still run (issue 51, N3).
CTXENG_FAIR_TENANT_MAX_PREVIEWS = envint("CTXENG_FAIR_TENANT_MAX_PREVIEWS", "1")
for _name in ("CTXENG_FAIR_TENANT_MAX_RUNNING", "CTXENG_FAIR_TENANT_MAX_PREVIEWS"):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name}: expected 0 (no cap) or a positive number of workers")
if CTXENG_FAIR_REQUEUE_SECONDS < 0 or CTXENG_FAIR_LEASE_SECONDS <= 0:
    raise ImproperlyConfigured("CTXENG_FAIR_REQUEUE_SECONDS, CTXENG_FAIR_LEASE_SECONDS: expected positive seconds")
# A turn runs an assembly job or an impact preview, whichever is next (fair dispatch): both tasks
# get the larger of the two kinds' time limits.
CTXENG_TURN_SOFT_TIME_LIMIT = max(CTXENG_JOB_SOFT_TIME_LIMIT, round(CTXENG_IMPACT_TIME_LIMIT_SECONDS) + 60)
CTXENG_TURN_TIME_LIMIT = max(CTXENG_JOB_TIME_LIMIT, round(CTXENG_IMPACT_TIME_LIMIT_SECONDS) + 120)
# Test hooks read by the tasks (never set in production): sleep before assembling or before an
# impact preview, or SIGKILL the worker process for jobs of one run id. They make worker-crash
# and fairness tests deterministic.
CTXENG_TEST_TASK_SLEEP_SECONDS = envfloat("CTXENG_TEST_TASK_SLEEP_SECONDS", "0")
# When set, only jobs of this run id sleep CTXENG_TEST_TASK_SLEEP_SECONDS (the others run at once).
CTXENG_TEST_TASK_SLEEP_RUN_ID = os.environ.get("CTXENG_TEST_TASK_SLEEP_RUN_ID", "")
CTXENG_TEST_PREVIEW_SLEEP_SECONDS = envfloat("CTXENG_TEST_PREVIEW_SLEEP_SECONDS", "0")
CTXENG_TEST_CRASH_RUN_ID = os.environ.get("CTXENG_TEST_CRASH_RUN_ID", "")
# Comma-separated points of manifests.services.CRASH_POINTS: the first attempt of a job of run
# `crash-at-<point>` SIGKILLs its worker process there (the crash-consistency test).
CTXENG_TEST_CRASH_AT = os.environ.get("CTXENG_TEST_CRASH_AT", "")

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = CTXENG_JOB_SOFT_TIME_LIMIT
CELERY_TASK_TIME_LIMIT = CTXENG_JOB_TIME_LIMIT
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker outage never ends a worker (issue 51, N2): it reconnects for as long as the outage lasts
# (Celery's default gives up after 100 attempts, about an hour, and exits). A job running when the
# connection drops runs to its end (set explicitly: Celery 6 is to cancel such jobs by default);
# its message comes back with the broker and the claim refuses that second run. What the outage
# lost (a restart without persistence empties the queues) the sweeper process re-sends
# (`manage.py recover_jobs --every`, docs/production.md).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# An unacknowledged message comes back after this; it must exceed the hard time limit, or a job
# that is still running would be delivered twice (harmless, the claim refuses it, but wasteful).
# Recovery after a crash does not wait for it: the stale-job sweep requeues from the database.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": envint("CTXENG_VISIBILITY_TIMEOUT", str(CTXENG_TURN_TIME_LIMIT + 60)),
}

# --------------------------------------------------------------------------- examples

CTXENG_VENDORED_EXAMPLES_DIR = BASE_DIR / "docs" / "examples"
CTXENG_EXAMPLES_DIR = Path(os.environ.get("CTXENG_EXAMPLES_DIR") or CTXENG_VENDORED_EXAMPLES_DIR)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("CTXENG_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
