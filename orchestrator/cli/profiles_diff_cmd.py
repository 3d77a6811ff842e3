"""``sandboxctl profiles diff [NAME] --against PATH``: the profiles in force against a proposal, as runs would get
them — each profile added, removed or changed, the fields of its resolved profile old -> new — and whether a
running service that re-reads its profiles would take the proposed set (docs/profiles.md, "Changing a profile
while running").

"In force": the built-ins and ``$SANDBOX_PROFILES_PATH``, as a service started in this environment reads them.
"Proposed": ``--against DIR[:DIR...]`` (the built-ins and those directories, in place of
``$SANDBOX_PROFILES_PATH``: a ConfigMap's next version, say), or ``--against NAME.yaml`` (the set in force with
that one file in place of NAME). Exit codes, as diff(1)'s: 0 no difference, 1 differences, 2 a proposed set a
service would refuse (each problem on stderr), an unknown name or a bad argument.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from orchestrator.cli.output import Subparsers, emit_json, fail, say

if TYPE_CHECKING:
    from pydantic import JsonValue

    from orchestrator.domain.profile_diff import ProfileDifference, ProfilesDiff

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_INVALID = 2
_HASH_SHOWN = 12
_REFUSED = "a running service would refuse the proposed set and keep the one in force"


def register(commands: Subparsers) -> None:
    """Add ``diff`` to ``sandboxctl profiles``."""
    diff = commands.add_parser(
        "diff",
        help="the profiles in force against proposed ones: what a reload would change (exit 1) or refuse (exit 2)",
        description="Compare the profiles in force (the built-ins and $SANDBOX_PROFILES_PATH) with proposed ones, "
        "resolved as runs get them: each profile added, removed or changed, and the fields of its resolved profile "
        "old -> new. Exit 0: no difference; 1: differences; 2: a running service would refuse the proposed set "
        "and keep the one in force (the problems on stderr).",
    )
    diff.add_argument("name", nargs="?", help="one profile only")
    diff.add_argument(
        "--against",
        metavar="PATH",
        required=True,
        help="the proposal: directories separated by ':' (in place of $SANDBOX_PROFILES_PATH), or one NAME.yaml "
        "file (in place of NAME)",
    )
    diff.add_argument("--config", metavar="FILE", help="resolve both under this config's caps (what runs under it get)")
    diff.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    diff.set_defaults(handler=_diff)


def _diff(args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestrator.domain.errors import OrchestratorError
    from orchestrator.pipeline.config import load_config
    from orchestrator.profiles.diff import compare_sets, proposed
    from orchestrator.profiles.paths import builtin_dir, default_search_path
    from orchestrator.profiles.snapshot import ProfileSnapshot

    try:
        caps = load_config(Path(args.config)).caps if args.config is not None else None
        in_force = default_search_path()
        result = compare_sets(
            ProfileSnapshot(in_force), proposed(in_force, builtin_dir(), args.against), caps=caps, only=args.name
        )
    except OrchestratorError as err:
        return fail(err.code, err.message, EXIT_INVALID, json_out=args.json)
    if args.json:
        emit_json(result.model_dump(mode="json"))
    else:
        _print(result)
    for problem in result.refused:  # on stderr, whatever stdout holds
        fail("CONFIG.INVALID", f"{_REFUSED}: {problem}", EXIT_INVALID)
    if result.refused:
        return EXIT_INVALID
    return EXIT_DIFFERENT if result.differences else EXIT_SAME


def _value(field: str, value: JsonValue) -> str:
    """A field's value for people: JSON, and a size in bytes in binary units too."""
    from orchestrator.profiles import format_size

    text = json.dumps(value, ensure_ascii=False)
    if field.endswith("_bytes") and isinstance(value, int) and not isinstance(value, bool):
        text += f" ({format_size(value)})"
    return text


def _hashes(difference: ProfileDifference) -> str:
    old, new = difference.old_profile_hash, difference.new_profile_hash
    shown = [h[:_HASH_SHOWN] if h is not None else "-" for h in (old, new)]
    return {"added": shown[1], "removed": shown[0]}.get(difference.change, f"{shown[0]} -> {shown[1]}")


def _print(result: ProfilesDiff) -> None:
    say(f"in force: {':'.join(result.old_search_path)}")
    say(f"proposed: {':'.join(result.new_search_path)}")
    width = max((len(d.name) for d in result.differences), default=0)
    for difference in result.differences:
        say(f"{difference.change:<8} {difference.name:<{width}}  (profile_hash {_hashes(difference)})")
        for side, error in (("in force", difference.old_error), ("proposed", difference.new_error)):
            if error is not None:
                say(f"  {side}, it does not resolve: {error}")
        for change in difference.fields:
            say(f"  {change.field}: {_value(change.field, change.old)} -> {_value(change.field, change.new)}")
        resolved_both = difference.old_error is None and difference.new_error is None
        if difference.change == "changed" and resolved_both and not difference.fields:
            say("  (no field a run gets differs under these caps: only what they hide changed)")
    if result.unchanged:
        say(f"unchanged: {', '.join(result.unchanged)}")
