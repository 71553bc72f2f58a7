"""`manage.py load_example`: the worked example, ready to browse (run by `make run`).

Creates tenant `tenant-x` and user `demo` (password `demo`, every role), imports and publishes the
example policy and, next to it, the starter policies (ctxeng.starters: chat-agent, coding-agent,
research-agent), and submits both example requests through the real job path (in-process without
REDIS_URL, Celery with it). Idempotent: a published revision with the same body is reused, and each
request carries a fixed Idempotency-Key.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from ctxeng import starters
from ctxeng.accounts.models import Role, Tenant
from ctxeng.accounts.services import tenant_member_add
from manifests.examples import example_dir, example_json, example_text
from manifests.services import assembly_job_submit
from policies.services import policy_import

TENANT = "tenant-x"


class Command(BaseCommand):
    help = "Load the research-agent worked example: tenant-x, user demo/demo, policy, starter policies, two assemblies."

    def handle(self, *args, **options) -> None:
        tenant_member_add(username="demo", tenant_slug=TENANT, roles=list(Role.values), password="demo")
        user = get_user_model().objects.get(username="demo")
        tenant = Tenant.objects.get(slug=TENANT)
        revision = policy_import(
            tenant=tenant, text=example_text("policy.yaml"), user=user, publish=True, note="worked example"
        )
        self.stdout.write(f"policy {revision.policy.policy_id}/{revision.revision} {revision.status}")
        for name in starters.names():
            starter = policy_import(tenant=tenant, text=starters.text(name), user=user, publish=True, note="starter policy")
            self.stdout.write(f"starter policy {starter.policy.policy_id}/{starter.revision} {starter.status}")
        for filename in ("request.json", "request-blocked.json"):
            job, created = assembly_job_submit(
                user=user, data=example_json(filename), idempotency_key=f"load-example:{filename}"
            )
            job.refresh_from_db()
            verb = "submitted" if created else "already submitted"
            self.stdout.write(f"{filename}: {verb} as assembly {job.id} ({job.status})")
        self.stdout.write(f"examples from {example_dir()}; log in as demo / demo")
