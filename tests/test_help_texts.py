"""Every argument a user can type has its help: each `python -m ctxeng` command and option (the CLI
reference in the docs is generated from these texts, docs/hooks/reference.py) and each of the
service's management commands (`manage.py help <command>`). A class test: an argument added, or a
help text dropped, without words for the user fails here, naming it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ctxeng.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = sorted(
    (path.parts[-4], path.stem)
    for path in ROOT.glob("*/management/commands/*.py")
    if path.stem != "__init__"
)


def undocumented(parser: argparse.ArgumentParser, where: str) -> list[str]:
    """`where` plus each option or positional of `parser` (and of its subcommands) with no help."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            for name, sub in action.choices.items():
                if name not in helped:
                    missing.append(f"{where} {name}")
                missing += undocumented(sub, f"{where} {name}")
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_the_cli_has_commands_to_find():
    names = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)][0].choices
    assert {"assemble", "validate-policy", "usage", "schema", "policy"} <= set(names)


def test_every_cli_command_and_argument_has_its_help():
    assert undocumented(build_parser(), "python -m ctxeng") == []


def test_the_management_commands_are_found():
    assert {("manifests", "issue_token"), ("manifests", "purge_content"), ("policies", "import_policy")} <= set(COMMANDS)


@pytest.mark.parametrize(("app", "name"), COMMANDS, ids=[name for _app, name in COMMANDS])
def test_every_management_command_and_argument_has_its_help(app, name):
    from django.core.management import load_command_class

    command = load_command_class(app, name)
    assert command.help, f"manage.py {name}: no help"
    assert undocumented(command.create_parser("manage.py", name), f"manage.py {name}") == []


def test_a_missing_help_is_named():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ok", help="fine")
    parser.add_argument("--bare")
    sub = parser.add_subparsers()
    sub.add_parser("run").add_argument("target")
    assert undocumented(parser, "tool") == ["tool --bare", "tool run", "tool run target"]
