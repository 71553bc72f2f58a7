"""ctxeng — context engineering for LLM agents.

`ctxeng.engine` is the pure-Python Context Builder; the Django project around it (settings, Celery
app, REST API and dashboard) lives in this package and in the `policies` and `manifests` apps.
"""

__version__ = "0.2.0"
