"""The Context Builder: pure Python, no Django.

    from ctxeng.engine import assemble, parse_policy, parse_request
    result = assemble(parse_request(request_dict), parse_policy(policy_dict_or_yaml))
    result.status               # "ready" | "blocked"
    result.serialized_input     # provider payload (dict) or None when blocked
    result.manifest             # sealed ContextAssemblyManifest
    result.manifest_dict()      # the manifest as the JSON document the CLI and REST API return

Re-injected items (`artifact_ref`) are loaded through `assemble(..., artifacts=lookup)`, where
`lookup(artifact_id, revision)` returns a `StoredArtifact` or None. Input errors raise
`InvalidInput` whose `.errors` name field paths.
"""

from .errors import InvalidInput
from .lifecycle import replaced_revision_events, with_events
from .models import (
    AssemblyRequest,
    ContextAssemblyManifest,
    ContextItem,
    ContextPolicy,
    StoredArtifact,
    ToolCall,
    TransformRecord,
)
from .pipeline import ArtifactStore, AssemblyResult, assemble, compatibility_errors
from .policy import parse_policy, parse_request, policy_digest, policy_warnings

__all__ = [
    "ArtifactStore",
    "AssemblyRequest",
    "AssemblyResult",
    "ContextAssemblyManifest",
    "ContextItem",
    "ContextPolicy",
    "InvalidInput",
    "StoredArtifact",
    "ToolCall",
    "TransformRecord",
    "assemble",
    "compatibility_errors",
    "parse_policy",
    "parse_request",
    "policy_digest",
    "policy_warnings",
    "replaced_revision_events",
    "with_events",
]
