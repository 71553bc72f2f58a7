"""Reads for policies and revisions, filtered by the user's tenants (others' policies: 404)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from ctxeng.accounts.models import Tenant
from ctxeng.accounts.selectors import tenants_for
from ctxeng.engine import parse_policy
from ctxeng.engine.models import ContextPolicy
from ctxeng.engine.upgrades import missing_records
from ctxeng.server.errors import BadReference, NotFound

from .models import Policy, PolicyRevision, RevisionStatus


def policies_for(user: AbstractBaseUser) -> QuerySet[Policy]:
    return Policy.objects.filter(tenant__in=tenants_for(user)).select_related("tenant").order_by("policy_id", "tenant")


def policy_get(user: AbstractBaseUser, policy_id: str, *, tenant: str | None = None) -> Policy:
    policies = policies_for(user).filter(policy_id=policy_id)
    if tenant:
        policies = policies.filter(tenant__slug=tenant)
    found = list(policies[:2])
    if not found:
        raise NotFound(f"policy {policy_id}: not found")
    if len(found) > 1:
        raise BadReference(f"policy {policy_id}: exists in several of your tenants; add ?tenant=<slug>")
    return found[0]


def revision_get(policy: Policy, revision: int) -> PolicyRevision:
    found = PolicyRevision.objects.filter(policy=policy, revision=revision).first()
    if found is None:
        raise NotFound(f"policy {policy.policy_id} revision {revision}: not found")
    return found


def current_revision(policy: Policy) -> PolicyRevision | None:
    return PolicyRevision.objects.filter(policy=policy, status=RevisionStatus.PUBLISHED).first()


def revision_for_assembly(*, tenant: Tenant, policy_id: str, revision: int | None) -> PolicyRevision:
    """The revision an assembly runs under: the named one, or the policy's current published one.

    Unknown policy, unknown revision, a draft, or no published revision: BadReference (400).
    """
    policy = Policy.objects.filter(tenant=tenant, policy_id=policy_id).first()
    if policy is None:
        raise BadReference(f"policy.id: unknown policy {policy_id!r} in tenant {tenant.slug!r}")
    if revision is None:
        found = current_revision(policy)
        if found is None:
            raise BadReference(f"policy.id: policy {policy_id!r} has no published revision")
        return found
    found = PolicyRevision.objects.filter(policy=policy, revision=revision).first()
    if found is None:
        raise BadReference(f"policy.revision: unknown revision {revision} of policy {policy_id!r}")
    if found.status == RevisionStatus.DRAFT:
        raise BadReference(f"policy.revision: revision {revision} of policy {policy_id!r} is a draft; publish it first")
    return found


def upgrade_records_missing(*, revision: PolicyRevision, policy: ContextPolicy) -> list[str]:
    """`path: message` for each mechanism `policy` (the body of draft `revision`) adds over the
    policy's published revision, the one publishing it replaces, without an `upgrades` entry naming
    it (seed §8; ctxeng.engine.upgrades); empty when none, or when nothing is published yet."""
    published = current_revision(revision.policy)
    if published is None or published.pk == revision.pk:
        return []
    return missing_records(parse_policy(published.body), policy)
