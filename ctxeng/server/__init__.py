"""The Django project's plumbing: settings, URLs, WSGI, the Celery app, middleware, the REST glue
(body parsing, errors, parameters), the login throttle, the token-count cache and the site-wide
views. The apps (`manifests`, `policies`, `ctxeng.accounts`, `ctxeng.audit`, `ctxeng.content`) sit
beside it; the light library (`ctxeng.engine`, `ctxeng.sdk`, `ctxeng.client`, `ctxeng.cli`,
`ctxeng.telemetry`, `ctxeng.starters`) never imports it (pyproject.toml's import contracts)."""
