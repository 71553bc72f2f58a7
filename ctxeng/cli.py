"""`python -m ctxeng` — assemble, validate a policy, or print a JSON Schema, from a shell.

    python -m ctxeng assemble --policy P.yaml --request R.json [--artifacts DIR] [--manifest-out M.json] [--input-out I.json]
    python -m ctxeng validate-policy P.yaml [--previous OLD.yaml]
    python -m ctxeng usage M.json --input-tokens N [--cached-tokens N] [--output-tokens N] [--manifest-out M2.json]
    python -m ctxeng schema {request,policy,manifest}
    python -m ctxeng policy list
    python -m ctxeng policy init NAME [--id ID] [--revision N] > policy.yaml

`--artifacts DIR` is the artifact store for re-injected items (`artifact_ref`): every `*.json` file
in DIR is one stored artifact revision `{artifact_id, revision, kind, content, writer, scope}`
(`content_hash` optional; checked when given). An item naming an older stored revision than the
newest is hit by a `revision_replaced` lifecycle event, as the service does.

With the OpenTelemetry variables set (`OTEL_EXPORTER_OTLP_ENDPOINT`, ...; ctxeng.telemetry),
`assemble` emits the assembly span and its stage spans, a child of `TRACEPARENT` when that is set;
a protocol it cannot export refuses the command (exit 2). Unset, nothing of OpenTelemetry is imported.

`validate-policy --previous OLD.yaml` applies the publish rule of seed §8 offline
(ctxeng.engine.upgrades): one `invalid:` line per mechanism added since OLD without an `upgrades`
entry naming it, exit 2.

`usage` records the provider's reported usage for the call made with an assembled manifest's
input: it prints the manifest with `budget.actual_input_tokens` beside the estimate, as the service
serves it once usage is reported, and on stderr the estimate, the actual count and their ratio. The
sealed document is not changed (its hashes, and a digest of it, stay): usage is an appended record.
A blocked manifest has no usage (exit 2).

`policy init` prints a starter policy (ctxeng.starters: chat-agent, coding-agent, research-agent)
as commented YAML, with `--id` and `--revision` replacing its own `policy.id` and `policy.revision`.

Exit codes: 0 ready (or valid, or printed), 3 blocked, 2 invalid input (an unknown starter
too, with the known names), with one `path: message` line per error on stderr. No traceback
reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

EXIT_READY = 0
EXIT_INVALID = 2
EXIT_BLOCKED = 3

SCHEMAS = ("request", "policy", "manifest")


def _read(path: str, what: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise _Invalid([f"{what}: cannot read {path!r}: {exc.strerror}"]) from None


class _Invalid(Exception):
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors


def _write_json(path: str | None, doc: object) -> None:
    _write_text(path, json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def _write_text(path: str | None, text: str) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")


def _revision_key(revision: str) -> tuple[int, int | str]:
    return (0, int(revision)) if revision.isascii() and revision.isdigit() else (1, revision)


def load_artifacts(directory: str):
    """The `--artifacts DIR` store: (lookup(artifact_id, revision), artifact_id -> revisions oldest first)."""
    from .engine import StoredArtifact
    from .engine.errors import InvalidInput, load_json_text, validate
    from .engine.hashing import sha256_text

    root = Path(directory)
    if not root.is_dir():
        raise _Invalid([f"artifacts: {directory!r} is not a directory"])
    store: dict[tuple[str, str], StoredArtifact] = {}
    errors: list[str] = []
    for path in sorted(root.glob("*.json")):
        try:
            data = load_json_text(path.read_bytes(), what="artifact")
            if isinstance(data, dict) and "content_hash" not in data and isinstance(data.get("content"), str):
                data = {**data, "content_hash": sha256_text(data["content"])}
            artifact = validate(StoredArtifact, data, what="artifact")
        except InvalidInput as exc:
            errors.extend(f"artifacts/{path.name}: {e}" for e in exc.errors)
            continue
        if artifact.content_hash != sha256_text(artifact.content):
            errors.append(f"artifacts/{path.name}: content_hash: {artifact.content_hash} does not match the content")
            continue
        key = (artifact.artifact_id, str(artifact.revision))
        if key in store:
            errors.append(f"artifacts/{path.name}: {key[0]} revision {key[1]} is stored twice")
        store[key] = artifact
    if errors:
        raise _Invalid(errors)
    revisions: dict[str, list[str]] = {}
    for artifact_id, revision in store:
        revisions.setdefault(artifact_id, []).append(revision)
    for revs in revisions.values():
        revs.sort(key=_revision_key)

    def lookup(artifact_id: str, revision: int | str | None):
        if revision is None:
            revs = revisions.get(artifact_id)
            return store[(artifact_id, revs[-1])] if revs else None
        return store.get((artifact_id, str(revision)))

    return lookup, revisions


def cmd_assemble(args: argparse.Namespace) -> int:
    from .engine import (
        InvalidInput,
        assemble,
        parse_policy,
        parse_request,
        replaced_revision_events,
        with_events,
    )

    traced = _traces_checked()
    try:
        policy = parse_policy(_read(args.policy, "policy"))
        request = parse_request(_read(args.request, "request"))
        lookup = None
        if args.artifacts:
            lookup, revisions = load_artifacts(args.artifacts)
            request = with_events(request, policy, replaced_revision_events(request, revisions))
        started_ns = time.perf_counter_ns()
        result = assemble(request, policy, artifacts=lookup)
    except InvalidInput as exc:
        raise _Invalid([f"{exc.what}: {e}" if exc.what == "policy" else e for e in exc.errors]) from None
    if traced:
        from . import telemetry

        if telemetry.record_local_assembly(result=result, started_ns=started_ns, ended_ns=time.perf_counter_ns()):
            telemetry.force_flush()
    # The same bytes as _write_json(manifest_dict()), from pydantic's serializer: json.dumps with
    # an indent runs the pure-Python encoder, most of the CLI's time on a manifest of 2,000 items.
    _write_text(args.manifest_out, result.manifest.model_dump_json(indent=2) + "\n")
    m = result.manifest
    if args.input_out and result.serialized_input is not None:
        _write_json(args.input_out, result.serialized_input)
    elif args.input_out and args.input_out != "-":
        # Blocked: there is no model input, and a stale file from an earlier run must not pass for one.
        Path(args.input_out).unlink(missing_ok=True)
    summary = f"{m.assembly.status.value}: {len(m.included)} included, {len(m.excluded)} excluded"
    if m.assembly.blocked_reason:
        summary += f"; blocked_reason={m.assembly.blocked_reason.value} missing={','.join(m.assembly.missing)}"
    print(summary, file=sys.stderr)
    return EXIT_BLOCKED if m.assembly.blocked_reason else EXIT_READY


def cmd_usage(args: argparse.Namespace) -> int:
    from .engine.errors import InvalidInput, validate
    from .engine.models import ContextAssemblyManifest
    from .engine.seal import with_actual_usage

    try:
        document = json.loads(_read(args.manifest, "manifest"))
        validate(ContextAssemblyManifest, document, what="manifest")
    except json.JSONDecodeError as exc:
        raise _Invalid([f"manifest: not JSON ({exc.msg} at line {exc.lineno})"]) from None
    except InvalidInput as exc:
        raise _Invalid([f"manifest: {e}" for e in exc.errors]) from None
    for name in ("input_tokens", "cached_tokens", "output_tokens"):
        if (getattr(args, name) or 0) < 0:
            raise _Invalid([f"--{name.replace('_', '-')}: must be 0 or more"])
    if args.cached_tokens > args.input_tokens:
        raise _Invalid(["--cached-tokens: more than --input-tokens (the cached tokens are part of the input)"])
    try:
        shown = with_actual_usage(document, args.input_tokens)
    except ValueError as exc:
        raise _Invalid([str(exc)]) from None
    _write_json(args.manifest_out, shown)
    estimate = shown["budget"].get("payload_tokens")
    ratio = f"{args.input_tokens / estimate:.3f}" if estimate else "n/a"
    print(f"usage: estimated {estimate}, actual {args.input_tokens} input tokens (ratio {ratio}); "
          f"cached {args.cached_tokens}, output {args.output_tokens}", file=sys.stderr)
    return EXIT_READY


def _traces_checked() -> bool:
    """Whether the OTel variables ask for traces; a protocol that cannot be honoured refuses the
    command before it assembles (exit 2), rather than send spans where no collector listens."""
    from . import telemetry

    try:
        telemetry.check()
    except telemetry.ConfigurationError as exc:
        raise _Invalid([str(exc)]) from None
    return telemetry.enabled()


def cmd_validate_policy(args: argparse.Namespace) -> int:
    from .engine import InvalidInput, parse_policy, policy_digest, policy_warnings
    from .engine.upgrades import missing_records

    try:
        policy = parse_policy(_read(args.policy, "policy"))
    except InvalidInput as exc:
        raise _Invalid(exc.errors) from None
    if args.previous is not None:
        # The publish rule of seed §8, offline: each mechanism added over the previous revision
        # needs an `upgrades` entry naming it (the service applies the same engine function).
        try:
            previous = parse_policy(_read(args.previous, "previous"))
        except InvalidInput as exc:
            raise _Invalid([f"previous: {e}" for e in exc.errors]) from None
        if previous.policy.id != policy.policy.id:
            raise _Invalid([f"policy.id: {policy.policy.id!r} is not the previous revision's policy {previous.policy.id!r}"])
        missing = missing_records(previous, policy)
        if missing:
            raise _Invalid(missing)
    print(f"valid: {policy.label} digest {policy_digest(policy)}")
    for warning in policy_warnings(policy):  # valid all the same: exit 0
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_READY


def schema_for(name: str) -> dict:
    from .engine.models import AssemblyRequest, ContextAssemblyManifest, ContextPolicy

    model = {"request": AssemblyRequest, "policy": ContextPolicy, "manifest": ContextAssemblyManifest}[name]
    return model.model_json_schema()


def cmd_schema(args: argparse.Namespace) -> int:
    _write_json(None, schema_for(args.name))
    return EXIT_READY


def cmd_policy_list(args: argparse.Namespace) -> int:
    from . import starters

    width = max(len(n) for n in starters.names())
    for name in starters.names():
        print(f"{name:<{width}}  {starters.SUMMARIES[name]}")
    return EXIT_READY


def cmd_policy_init(args: argparse.Namespace) -> int:
    from . import starters
    from .engine import InvalidInput, parse_policy

    try:
        text = starters.text(args.name, policy_id=args.id, revision=args.revision)
    except starters.UnknownStarter as exc:
        raise _Invalid([str(exc)]) from None
    try:
        parse_policy(text)  # an --id or --revision the policy refuses is an error here, not in the file
    except InvalidInput as exc:
        raise _Invalid(exc.errors) from None
    _write_text(None, text)
    return EXIT_READY


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep its message, drop the noise
        self.print_usage(sys.stderr)
        print(f"ctxeng: {message}", file=sys.stderr)
        sys.exit(EXIT_INVALID)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ctxeng", description="Assemble model context under a versioned ContextPolicy.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    a = sub.add_parser("assemble", help="assemble a request under a policy; manifest to stdout")
    a.add_argument("--policy", required=True, help="ContextPolicy YAML or JSON file ('-' for stdin)")
    a.add_argument("--request", required=True, help="AssemblyRequest JSON file ('-' for stdin)")
    a.add_argument("--artifacts", metavar="DIR", help="artifact store for re-injected items: one JSON file per stored revision")
    a.add_argument("--manifest-out", help="write the manifest here instead of stdout")
    a.add_argument("--input-out", help="write the provider payload here (not written when blocked)")
    a.set_defaults(func=cmd_assemble)
    v = sub.add_parser("validate-policy", help="validate a ContextPolicy file and print its digest")
    v.add_argument("policy", help="ContextPolicy YAML or JSON file ('-' for stdin)")
    v.add_argument("--previous", metavar="OLD", help="the revision it replaces: each mechanism added since needs an upgrades entry (seed §8)")
    v.set_defaults(func=cmd_validate_policy)
    u = sub.add_parser("usage", help="show a manifest with the provider's actual input tokens beside the estimate")
    u.add_argument("manifest", help="a manifest written by `assemble` ('-' for stdin)")
    u.add_argument("--input-tokens", type=int, required=True, help="the provider's reported input (prompt) tokens")
    u.add_argument("--cached-tokens", type=int, default=0, help="of them, read from the provider's cache")
    u.add_argument("--output-tokens", type=int, default=0, help="the provider's reported output tokens")
    u.add_argument("--manifest-out", help="write the manifest here instead of stdout")
    u.set_defaults(func=cmd_usage)
    s = sub.add_parser("schema", help="print the JSON Schema of a wire format")
    s.add_argument("name", choices=SCHEMAS, help="the wire format: " + ", ".join(SCHEMAS))
    s.set_defaults(func=cmd_schema)
    p = sub.add_parser("policy", help="starter policies shipped with ctxeng")
    psub = p.add_subparsers(dest="policy_command", required=True, parser_class=_Parser)
    pl = psub.add_parser("list", help="list the starter policies")
    pl.set_defaults(func=cmd_policy_list)
    pi = psub.add_parser("init", help="print a starter policy as commented YAML")
    pi.add_argument("name", help="a starter policy: " + ", ".join(_starter_names()))
    pi.add_argument("--id", help="policy.id of the written policy (default: the starter's name)")
    pi.add_argument("--revision", type=int, help="policy.revision of the written policy (default: 1)")
    pi.set_defaults(func=cmd_policy_init)
    return parser


def _starter_names() -> list[str]:
    from . import starters

    return starters.names()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except _Invalid as exc:
        for line in exc.errors:
            print(f"invalid: {line}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
