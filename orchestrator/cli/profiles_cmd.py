"""``sandboxctl profiles list|show|validate|schema``: inspect and check execution profiles (``usage``,
``recommend`` and ``whatif``: profiles_usage_cmd.py).

Profiles come from the built-in directory plus ``$SANDBOX_PROFILES_PATH`` (colon-separated, later
wins). Exit codes: 0 ok; 2 an invalid profile or an unknown name, with ``sandboxctl: CODE: message``
on stderr (``CONFIG.INVALID: file:line: field: message`` for a bad file). Heavy imports (pydantic,
yaml) happen inside the handlers so that start-up stays lean.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.cli import profiles_usage_cmd
from orchestrator.cli.output import Subparsers, emit_json, fail
from orchestrator.domain.text import terminal_safe

if TYPE_CHECKING:
    from orchestrator.domain.errors import OrchestratorError
    from orchestrator.profiles import Profile, ProfileRegistry, ResolvedProfile

EXIT_OK = 0
EXIT_INVALID = 2
_DESCRIPTION_WIDTH = 72


def register(sub: Subparsers) -> None:
    """Add ``profiles`` (with ``list``, ``show``, ``validate``, ``schema``) to a sandboxctl-style parser."""
    parser = sub.add_parser(
        "profiles",
        help="list, show and validate execution profiles",
        description="Execution profiles: the built-in ones plus those in $SANDBOX_PROFILES_PATH "
        "(colon-separated directories of NAME.yaml files; a later directory wins).",
    )
    commands = parser.add_subparsers(dest="profiles_command", metavar="COMMAND", required=True)

    listing = commands.add_parser("list", help="every profile: runtime, image, memory, wall timeout")
    listing.add_argument("--json", action="store_true", help="print a JSON array on stdout")
    listing.set_defaults(handler=_list)

    show = commands.add_parser(
        "show",
        help="one profile, as YAML (or resolved, with its hashes)",
        description="Print a profile with its extends chain merged, as YAML. With --resolved, print the "
        "effective settings (every unit explicit) with profile_hash and the seccomp profile's sha256; with "
        "--config too, narrowed by that config's caps, as a run under it gets them.",
    )
    show.add_argument("name", help="profile name")
    show.add_argument("--resolved", action="store_true", help="print the resolved profile and its hashes")
    show.add_argument(
        "--config", metavar="FILE", help="with --resolved: apply this config's caps (what a run under it gets)"
    )
    show.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    show.set_defaults(handler=_show)

    validate = commands.add_parser(
        "validate",
        help="check a profile file: exit 0 'ok', or 2 with file:line: field: message",
        description="Load, merge (extends is looked up on the search path, and in the file's own directory "
        "when that is not on it already: a file on the search path resolves as runs resolve it) and resolve a "
        "profile file, including its seccomp profile.",
    )
    validate.add_argument("file", help="a NAME.yaml profile file")
    validate.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    validate.set_defaults(handler=_validate)

    schema = commands.add_parser("schema", help="print the JSON Schema of a profile file")
    schema.set_defaults(handler=_schema)
    profiles_usage_cmd.register(commands)  # usage, recommend, whatif
    from orchestrator.cli import profiles_diff_cmd  # here: one hunk beside the others' registrations

    profiles_diff_cmd.register(commands)  # diff


def _problems(err: OrchestratorError) -> list[str]:
    """One line per problem: ``file:line: field: message``."""
    problems = err.details.get("problems")
    if isinstance(problems, list) and problems:
        return [str(p) for p in problems]
    file = err.details.get("file")
    if isinstance(file, str) and file and f"; {file}:" in err.message:
        first, *rest = err.message.split(f"; {file}:")
        return [first, *(f"{file}:{r}" for r in rest)]
    return [err.message]


def _refuse(err: OrchestratorError, json_out: bool) -> int:
    from orchestrator.domain.errors import ConfigInvalid, InputInvalid, ProfileNotFound

    code = EXIT_INVALID if isinstance(err, (ConfigInvalid, InputInvalid, ProfileNotFound)) else err.exit_code
    if json_out:
        return fail(err.code, err.message, code, json_out=True)
    for problem in _problems(err):
        fail(err.code, problem, code)
    return code


def _registry() -> ProfileRegistry:
    from orchestrator.profiles import ProfileRegistry

    return ProfileRegistry()


def _row(profile: Profile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "runtime": profile.runtime,
        "image": profile.image,
        "memory_bytes": profile.limits.memory,
        "wall_timeout_s": profile.limits.wall_timeout_s,
        "extends": profile.extends,
        "description": profile.description,
    }


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _list(args: argparse.Namespace) -> int:
    from orchestrator.domain.errors import OrchestratorError
    from orchestrator.profiles import survey

    try:
        found = survey(_registry())
    except OrchestratorError as err:  # the search path itself (a directory that is not one)
        return _refuse(err, args.json)
    rows = [_row(profile) for profile in found.profiles]
    if args.json:  # the good ones still: a broken file is said on stderr (and in the exit status)
        emit_json(rows)
    else:
        _table(rows)
    for bad in found.broken:
        _refuse(bad.error, False)
        if bad.unavailable:
            fail(
                bad.error.code,
                f"{bad.file}: not listed until this file is fixed: {', '.join(bad.unavailable)} "
                f"(check it with: sandboxctl profiles validate {bad.file})",
                EXIT_INVALID,
            )
    return EXIT_INVALID if found.broken else EXIT_OK


def _table(rows: list[dict[str, Any]]) -> None:
    from orchestrator.profiles import format_size

    table = [
        (
            r["name"],
            r["runtime"],
            r["image"],
            format_size(r["memory_bytes"]),
            _seconds(r["wall_timeout_s"]),
            _clip(r["description"], _DESCRIPTION_WIDTH),
        )
        for r in rows
    ]
    header = ("NAME", "RUNTIME", "IMAGE", "MEMORY", "WALL", "DESCRIPTION")
    widths = [max(len(str(row[i])) for row in [header, *table]) for i in range(len(header) - 1)]
    for row in [header, *table]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        sys.stdout.write("  ".join([*cells, str(row[-1])]).rstrip() + "\n")


def _clip(text: str, width: int) -> str:
    text = terminal_safe(text)  # a profile file's own words: nothing a terminal would act on
    return text if len(text) <= width else text[: width - 1] + "…"


def _yaml_text(text: str) -> str:
    """YAML for people: the emitter already escapes controls, but not bidi or zero-width characters."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


def _resolved_view(resolved: ResolvedProfile) -> dict[str, Any]:
    """The resolved profile for people: everything but the seccomp JSON itself (its sha256 stays)."""
    data = resolved.model_dump(mode="json", exclude={"seccomp_json"})
    return {"profile_hash": data.pop("profile_hash"), **data}


def _as_run_gets_it(registry: ProfileRegistry, name: str, config: str | None) -> ResolvedProfile:
    """Resolved the way runs resolve it (pipeline.profiles_of), under ``config``'s caps (none without one)."""
    from orchestrator.pipeline.profiles_of import Profiles

    caps = None
    if config is not None:
        from pathlib import Path

        from orchestrator.pipeline.config import load_config

        caps = load_config(Path(config)).caps
    return Profiles.under(caps, registry).named(name)


def _show(args: argparse.Namespace) -> int:
    import yaml

    from orchestrator.domain.errors import OrchestratorError

    if args.config is not None and not args.resolved:
        return fail(
            "INPUT.INVALID",
            "--config: its caps narrow the resolved profile: add --resolved",
            EXIT_INVALID,
            json_out=args.json,
        )
    try:
        registry = _registry()
        profile = registry.get(args.name)
        resolved = _as_run_gets_it(registry, args.name, args.config) if args.resolved else None
        source = registry.path_of(args.name)
    except OrchestratorError as err:
        return _refuse(err, args.json)
    if resolved is not None:
        if args.json:
            emit_json(resolved.model_dump(mode="json"))  # complete: validates back into ResolvedProfile
            return EXIT_OK
        capped = f"; the caps of {args.config}" if args.config is not None else "; no caps"
        sys.stdout.write(terminal_safe(f"# resolved profile {profile.name} (from {source}{capped})") + "\n")
        sys.stdout.write(f"# seccomp JSON: {len(resolved.seccomp_json)} bytes, not shown (see --json)\n")
        sys.stdout.write(_yaml_text(yaml.safe_dump(_resolved_view(resolved), sort_keys=False, allow_unicode=True)))
        return EXIT_OK
    data = profile.model_dump(mode="json")
    if args.json:
        emit_json(data)
        return EXIT_OK
    chain = f", extends {profile.extends}" if profile.extends else ""
    header = f"# profile {profile.name} (from {source}{chain}; sizes in bytes, times in seconds)"
    sys.stdout.write(terminal_safe(header) + "\n")
    sys.stdout.write(_yaml_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True)))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestrator.domain.errors import OrchestratorError

    file = Path(args.file)
    try:
        # resolved exactly as runs resolve it: the file's directory is added only when not on the path already
        registry = _registry().with_dir(file.parent) if file.parent.is_dir() else _registry()
        profile = registry.load_file(file)
        resolved = registry.resolve(profile)
    except OrchestratorError as err:
        return _refuse(err, args.json)
    if args.json:
        emit_json({"ok": True, "name": profile.name, "profile_hash": resolved.profile_hash, "file": str(file)})
    else:
        sys.stdout.write(terminal_safe(f"ok: {profile.name} (profile_hash {resolved.profile_hash})") + "\n")
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    from orchestrator.profiles import profile_json_schema_text

    sys.stdout.write(profile_json_schema_text())
    return EXIT_OK
