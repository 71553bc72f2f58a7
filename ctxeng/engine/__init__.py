"""The Context Builder: pure Python, no Django.

    from ctxeng.engine import assemble, parse_policy, parse_request
    result = assemble(parse_request(request_dict), parse_policy(policy_dict_or_yaml))
    result.status               # "ready" | "blocked"
    result.serialized_input     # provider payload (dict) or None when blocked
    result.manifest             # sealed ContextAssemblyManifest
    result.manifest_dict()      # the manifest as the JSON document the CLI and REST API return

Input errors raise `InvalidInput` whose `.errors` name field paths.
"""

from .errors import InvalidInput
from .models import (
    AssemblyRequest,
    ContextAssemblyManifest,
    ContextItem,
    ContextPolicy,
    ToolCall,
    TransformRecord,
)
from .pipeline import AssemblyResult, assemble
from .policy import parse_policy, parse_request, policy_digest

__all__ = [
    "AssemblyRequest",
    "AssemblyResult",
    "ContextAssemblyManifest",
    "ContextItem",
    "ContextPolicy",
    "InvalidInput",
    "ToolCall",
    "TransformRecord",
    "assemble",
    "parse_policy",
    "parse_request",
    "policy_digest",
]
