"""App config for the audit trail; connects the login lockout signal (django-axes) to its event."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "ctxeng.audit"
    label = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        user_locked_out.connect(_record_lockout, dispatch_uid="ctxeng.audit.login_locked_out")


def _record_lockout(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    from axes.helpers import get_cool_off

    from .services import login_lockout_event

    login_lockout_event(username=username or "", ip_address=ip_address, cool_off=get_cool_off(request))
