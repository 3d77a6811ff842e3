"""Command-line arguments are input like any other: text that is not UTF-8 is refused at the edge.

Python hands undecodable argv bytes over as lone surrogates (``\\udcff``); such a string cannot be
encoded, so it would fail wherever it is first written (a hash, a record, a JSON reply) as an INTERNAL
error. Instead the command is refused with INPUT.INVALID naming the argument (``--cwd``, ``--env
#2``, ``ARGV #1``), never its value: values may be secrets.
"""

from __future__ import annotations

import argparse

from orchestrator.domain.text import has_surrogates


def _names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """How each destination is written on the command line, for every subcommand's arguments."""
    names: dict[str, str] = {}
    pending = [parser]
    while pending:
        current = pending.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
            elif action.option_strings:
                names.setdefault(action.dest, max(action.option_strings, key=len))
            else:  # a positional: its metavar, as the usage line shows it
                shown = action.metavar if isinstance(action.metavar, str) else action.dest
                names.setdefault(action.dest, shown.removeprefix("-- ").upper())
    return names


def undecodable_argument(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first argument in ``args`` that is not UTF-8, named for a message, or None."""
    names: dict[str, str] | None = None
    for dest, value in sorted(vars(args).items()):
        items = value if isinstance(value, list) else [value]
        # ARGV #1 is the program: the "--" before it is not counted
        first = 0 if dest == "argv" and items and items[0] == "--" else 1
        for number, item in enumerate(items, start=first):
            if isinstance(item, str) and has_surrogates(item):
                names = names or _names(parser)
                name = names.get(dest, dest)
                return f"{name} #{number}" if isinstance(value, list) else name
    return None
