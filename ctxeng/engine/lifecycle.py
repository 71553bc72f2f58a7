"""Lifecycle events the caller derives from its own records (policy `expiry.on`).

Contract: the engine acts on `request.lifecycle_events` in the permission and freshness gates; this
module holds the pure derivations a caller with an artifact store applies before assembling, so the
service and the CLI derive the same events from the same facts:

- `replaced_revision_events`: an item that names an artifact revision older than the newest the
  store holds is hit by `revision_replaced` (the new revision replaces the old);
- `with_events`: the request with events appended, keeping only the events the policy acts on
  (an event the policy does not list would make the request invalid).

The service adds `permission_revoked` (the artifact's writer lost their membership) and
`task_closed` (the run was closed) from its database; see `manifests.selectors.lifecycle_events_for`.
"""

from __future__ import annotations

from .models import AssemblyRequest, ContextItem, ContextPolicy, LifecycleEventRecord
from .vocabulary import LifecycleEvent


def named_artifact(item: ContextItem) -> tuple[str, str | None] | None:
    """The (artifact_id, revision) an item names: its artifact_ref's id, else its source_ref's; the
    revision from the artifact_ref, else the source_ref, else the item. The one reading shared by
    the service and the CLI (which emit events) and the gates (which match them)."""
    ref = item.artifact_ref
    artifact_id = ref.artifact_id if ref is not None else item.source_ref.get("artifact_id")
    if not isinstance(artifact_id, str):
        return None
    rev = ref.revision if ref is not None and ref.revision is not None else item.source_ref.get("revision")
    if rev is None:
        rev = item.revision
    return artifact_id, None if rev is None else str(rev)


def replaced_revision_events(request: AssemblyRequest, revisions: dict[str, list[str]]) -> list[LifecycleEventRecord]:
    """`revisions`: artifact_id -> its stored revisions, oldest first. An item naming a stored revision
    that is not the newest is hit, once per (artifact, revision); a revision the store does not
    hold is left to re-injection's object_identity and the gates."""
    events: dict[tuple[str, str], LifecycleEventRecord] = {}
    for item in request.candidates:
        named = named_artifact(item)
        if named is None or named[1] is None or not revisions.get(named[0]):
            continue
        artifact_id, revision = named
        stored = revisions[artifact_id]
        if revision in stored[:-1] and (artifact_id, revision) not in events:
            events[(artifact_id, revision)] = LifecycleEventRecord(
                event=LifecycleEvent.REVISION_REPLACED,
                artifact_id=artifact_id,
                revision=revision,
                detail=f"revision {stored[-1]} replaces it",
                emitted_by="service",
            )
    return list(events.values())


def with_events(request: AssemblyRequest, policy: ContextPolicy, events: list[LifecycleEventRecord]) -> AssemblyRequest:
    acted_on = [e for e in events if e.event in policy.expiry.on and e not in request.lifecycle_events]
    if not acted_on:
        return request
    return request.model_copy(update={"lifecycle_events": [*request.lifecycle_events, *acted_on]})
