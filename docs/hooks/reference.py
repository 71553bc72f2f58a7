"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift.

A page holds a marker comment and the hook replaces it:

- `<!-- generated: schema NAME -->` — the JSON Schema of `request`, `policy` or `manifest`
  (`ctxeng.cli.schema_for`, the same the CLI prints), as a table per object type;
- `<!-- generated: cli -->` — the help of every `python -m ctxeng` command, from its argument parser;
- `<!-- generated: openapi -->` — every REST operation of `docs/openapi.yaml` (which a test keeps
  equal to the schema the server serves);
- `<!-- generated: dependencies -->` — the light install's dependencies, as `pyproject.toml`
  declares them (name, version bounds and the comment above each), one list for every page;
- `<!-- include: FILE -->` — a file of the repository root (README.md, CHANGELOG.md), its links
  into `docs/` rewritten to be relative to the site.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- (generated|include): ([^>]+?) -->")


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: _expand(m.group(1), m.group(2).split()), markdown)


def _expand(kind: str, args: list[str]) -> str:
    if kind == "include":
        return _include(args[0])
    if args[0] == "schema":
        return schema_markdown(args[1])
    if args[0] == "cli":
        return cli_markdown()
    if args[0] == "openapi":
        return openapi_markdown()
    if args[0] == "dependencies":
        return dependencies_markdown()
    raise ValueError(f"unknown generated section {args!r}")


def light_dependencies() -> list[tuple[str, str]]:
    """(requirement, why) of each `[project] dependencies` entry of pyproject.toml, in its order; why
    is the comment written above it there (empty when none)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    out: list[tuple[str, str]] = []
    comment: list[str] = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("#"):
            comment.append(line.lstrip("# ").strip())
        elif line.startswith('"'):
            out.append((line.strip('",'), " ".join(comment)))
            comment = []
    return out


def dependencies_markdown() -> str:
    rows = ["| requirement | why |", "| --- | --- |"]
    rows += [f"| `{req}` | {_cell(why) or ''} |" for req, why in light_dependencies()]
    return "\n".join(rows)


def _include(name: str) -> str:
    text = (ROOT / name).read_text()
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    # the first heading stays the page's own title
    return text


def _type_of(spec: dict) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in spec:
        return " \\| ".join(f"`{v}`" for v in spec["enum"])
    if "const" in spec:
        return f"`{spec['const']}`"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in spec:
            return " \\| ".join(_type_of(s) for s in spec[key])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(spec.get('items', {}))}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map of {_type_of(spec['additionalProperties'])}"
    return str(kind)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _object_table(name: str, spec: dict) -> str:
    out = [f"### {name}", ""]
    if spec.get("description"):
        out += [spec["description"].strip(), ""]
    if "enum" in spec:
        return "\n".join(out + ["One of " + ", ".join(f"`{v}`" for v in spec["enum"]) + ".", ""])
    props = spec.get("properties", {})
    if not props:
        return "\n".join(out + [f"Type: {_type_of(spec)}.", ""])
    required = set(spec.get("required", []))
    out += ["| field | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
    for field, fspec in props.items():
        default = f"`{fspec['default']!r}`" if "default" in fspec else ""
        out.append(f"| `{field}` | {_cell(_type_of(fspec))} | {'yes' if field in required else ''} | "
                   f"{_cell(default)} | {_cell(fspec.get('description', ''))} |")
    return "\n".join(out + [""])


def schema_markdown(name: str) -> str:
    from ctxeng.cli import schema_for

    schema = schema_for(name)
    parts = [_object_table(schema.get("title", name), schema)]
    for def_name, spec in sorted(schema.get("$defs", {}).items()):
        parts.append(_object_table(def_name, spec))
    return "\n".join(parts)


def cli_markdown() -> str:
    from ctxeng.cli import build_parser

    parser = build_parser()
    out = ["```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._subparsers._group_actions:  # argparse keeps subcommands here
        for name, sub in action.choices.items():
            out += [f"### `python -m ctxeng {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
            for nested in getattr(sub, "_subparsers", None)._group_actions if sub._subparsers else []:
                for nname, nsub in nested.choices.items():
                    out += [f"### `python -m ctxeng {name} {nname}`", "", "```text",
                            nsub.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def openapi_markdown() -> str:
    doc = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    out = [f"The OpenAPI document: `docs/openapi.yaml` ({doc['info']['title']} {doc['info']['version']}), "
           "also served by the API at `/api/schema/` (Swagger UI at `/api/docs/`).", ""]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            out += [f"### `{method.upper()} {path}`", ""]
            if op.get("description") or op.get("summary"):
                out += [(op.get("summary") or op.get("description")).strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | description |", "| --- | --- | --- | --- |"]
                out += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else ''} | "
                        f"{_cell(p.get('description', ''))} |" for p in params]
                out.append("")
            codes = ", ".join(f"`{c}`" for c in op.get("responses", {}))
            out += [f"Responses: {codes}.", ""]
    return "\n".join(out)



def on_files(files, config):
    """The benchmark plots `make bench` writes in bench/results/ are pages' images too."""
    from mkdocs.structure.files import File

    results = ROOT / "bench" / "results"
    for png in sorted(results.glob("*.png")):
        files.append(File.generated(config, f"bench-results/{png.name}", abs_src_path=str(png)))
    return files
