"""Loading profiles from YAML: the search path, ``extends`` chains, errors naming file, line and field.

One profile per ``NAME.yaml`` file; ``name:`` may be omitted (it is the file name) and must equal it when
given. ``extends: PARENT`` deep-merges the parent's settings under the file's own (mappings are merged
key by key, lists and scalars replaced); ``name``, ``description`` and ``extends`` are the file's own
(an override, below, keeps the description). Chains may be of any depth; cycles and unknown parents are
refused at the ``extends`` line (a cycle at that of its first file that is not a built-in). A profile loads
only when every file of its chain is valid on its own (the profile each file defines validates, not only the
end of the chain): a broken file governs nothing, not even a profile that extends it and sets the broken
value itself; the refusal names the broken file.

``extends: NAME`` means the definition of NAME that wins on the search path, except in a file named NAME
itself: there it means the definition that file overrides, the next one down the search path (so
``workspace-write.yaml`` with ``extends: workspace-write`` changes the built-in one, and every profile that
extends ``workspace-write`` sees the change). Such an override keeps the description it overrides unless it
gives its own: it is the same profile, changed. Not when it changes what a description says a profile is
(runtime, seccomp, network, workspace mode): then the description would lie, and it must give its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.domain.errors import ConfigInvalid, ProfileNotFound
from orchestrator.profiles.models import NAME_RE, Network, Profile, ProfileCaps, ResolvedProfile
from orchestrator.profiles.paths import builtin_dir, check_dir, env_dirs, find_in, once_each
from orchestrator.profiles.resolve import resolve
from orchestrator.profiles.seccomp import SeccompProfile, load_seccomp
from orchestrator.yamlfile import load_yaml_mapping, validate

Loc = tuple[str | int, ...]
_NOT_INHERITED = ("name", "description", "extends")


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = _deep_merge(current, value)
        else:
            out[key] = value
    return out


def _value_at(data: Any, loc: Loc) -> Any:
    for part in loc:
        data = data[part]
    return data


def _merge_provenance(
    parent: dict[Loc, tuple[str, int]],
    child: dict[Loc, tuple[str, int]],
    child_data: Any,
    not_inherited: tuple[str, ...] = _NOT_INHERITED,
) -> dict[Loc, tuple[str, int]]:
    """Where each merged value comes from: the child's lines, and the parent's where the child is silent."""
    out = {loc: where for loc, where in parent.items() if not (loc and loc[0] in not_inherited)}
    for loc in child:
        if loc and not isinstance(_value_at(child_data, loc), dict):  # replaces whatever the parent had
            for inherited in [p for p in out if len(p) > len(loc) and p[: len(loc)] == loc]:
                del out[inherited]
    out.update(child)
    return out


def _locate(provenance: dict[Loc, tuple[str, int]], loc: Loc) -> tuple[str, int]:
    for cut in range(len(loc), -1, -1):
        where = provenance.get(loc[:cut])
        if where is not None:
            return where
    return provenance[()]


def _validate_merged(data: dict[str, Any], provenance: dict[Loc, tuple[str, int]], file: str, line: int) -> Profile:
    """The profile ``file`` defines (``data``: its settings merged over what it extends). A refusal is filed
    under ``file`` (``details["file"]``; ``line``, its ``extends:``, unless a problem is on a line of its own),
    each problem naming the file and line that set the value."""
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        problems: list[str] = []
        fields: list[str] = []
        own: int | None = None
        for item in err.errors(include_input=False, include_url=False):
            loc = tuple(item["loc"])
            field = ".".join(str(p) for p in loc) or "(root)"
            source, where = _locate(provenance, loc)
            if own is None and source == file:
                own = where
            fields.append(field)
            problems.append(f"{source}:{where}: {field}: {item['msg']}")
        raise ConfigInvalid(
            "; ".join(problems),
            details={"file": file, "line": own or line, "fields": fields, "problems": problems},
        ) from None


def _provenance(source: str, located: Any) -> dict[Loc, tuple[str, int]]:
    """Where each of one file's values is: its lines (the file's first line for the file as a whole)."""
    provenance: dict[Loc, tuple[str, int]] = {loc: (source, line) for loc, line in located.lines.items()}
    provenance.setdefault((), (source, 1))
    return provenance


def _cycle_maker(cycle: Sequence[Path]) -> Path:
    """The file a cycle is filed under: the first of its files that is not a built-in one (a user's file made
    it: nobody should be told to edit a built-in), the first file of the cycle when all are."""
    try:
        builtin = builtin_dir()
    except ConfigInvalid:  # no built-ins: every file is someone's
        return cycle[0]
    return next((p for p in cycle if p.resolve().parent != builtin), cycle[0])


# What a description says a profile is, beyond its limits (changing limits is what an override is for): an
# override that changes one of these keeps no description it does not give itself (untrusted.yaml with
# `extends: untrusted` and `runtime: runc` would still say gVisor).
_DESCRIBED: tuple[Loc, ...] = (("runtime",), ("seccomp",), ("network",), ("workspace", "mode"))


def _get(profile: Profile, loc: Loc) -> Any:
    value: Any = profile
    for part in loc:
        value = getattr(value, str(part))
    return value


def _said(value: Any) -> str:
    """A described value for people: a network as its mode and hosts."""
    if isinstance(value, Network):
        return " ".join([value.mode, ", ".join(value.allow)]).strip()
    return str(value)


def unknown_profile(name: object, known: list[str]) -> ProfileNotFound:
    """PROFILE.NOT_FOUND for ``name``, listing the ``known`` names."""
    return ProfileNotFound(
        f"unknown profile {str(name)[:128]!r} (known: {', '.join(known) or 'none'})",
        details={"profile": str(name)[:128], "known": known},
    )


@dataclass(frozen=True, slots=True)
class _Defined:
    """What one file defines: the profile, validated; its merged settings; the file and line of each; the files
    it was read from (its ``extends`` chain, the bottom first, this file last)."""

    profile: Profile
    data: dict[str, Any]
    provenance: dict[Loc, tuple[str, int]]
    files: tuple[Path, ...]


class ProfileRegistry:
    """Profiles on a search path: the built-in directory, then extra directories (later wins; a directory
    listed more than once counts at its last place only).

    ``extra_dirs=None`` takes them from ``$SANDBOX_PROFILES_PATH`` (colon-separated). Files are read
    when first needed and cached for the registry's life; make a new registry to see edits.
    """

    def __init__(
        self,
        extra_dirs: Sequence[str | os.PathLike[str]] | None = None,
        *,
        builtin: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        dirs: list[Path] = [builtin_dir()] if builtin else []
        if extra_dirs is None:
            dirs.extend(env_dirs(environ))
        else:
            dirs.extend(check_dir(d, "profiles directory") for d in extra_dirs)
        self._dirs: tuple[Path, ...] = once_each(dirs)  # a directory listed twice: at its last place
        self._parsed: dict[Path, tuple[Any, Any]] = {}
        self._profiles: dict[str, Profile] = {}
        self._defined_by: dict[Path, _Defined] = {}
        self._pinned: dict[str, Path] = {}

    @property
    def search_path(self) -> tuple[Path, ...]:
        """The directories searched, in order (a later one wins)."""
        return self._dirs

    def with_dir(self, directory: str | os.PathLike[str]) -> ProfileRegistry:
        """A new registry with ``directory`` appended to the search path (so it wins), unless it is on it
        already: then the same search path, so names resolve exactly as they do here (appended again, it
        would win over the directories after it)."""
        if Path(directory).resolve() in {d.resolve() for d in self._dirs}:
            return ProfileRegistry(self._dirs, builtin=False)
        return ProfileRegistry([*self._dirs, directory], builtin=False)

    # -- lookups ---------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every profile name on the search path, sorted."""
        found = set(self._pinned)
        for directory in self._dirs:
            for path in directory.glob("*.yaml"):
                if path.is_file() and NAME_RE.match(path.stem):
                    found.add(path.stem)
        return sorted(found)

    def path_of(self, name: str) -> Path:
        """The file that defines ``name`` (PROFILE.NOT_FOUND, listing the known names, when none does)."""
        if isinstance(name, str) and name in self._pinned:
            return self._pinned[name]
        path = find_in(self._dirs, f"{name}.yaml") if isinstance(name, str) and NAME_RE.match(name) else None
        if path is None:
            raise unknown_profile(name, self.names())
        return path

    def get(self, name: str) -> Profile:
        """The profile ``name``, with its ``extends`` chain merged and validated."""
        cached = self._profiles.get(name)
        if cached is None:
            cached = self._load(name, self.path_of(name))
            self._profiles[name] = cached
        return cached

    def profiles(self) -> list[Profile]:
        """Every profile on the search path (the first invalid one raises CONFIG.INVALID)."""
        return [self.get(n) for n in self.names()]

    def load_file(self, path: str | os.PathLike[str]) -> Profile:
        """Load one profile file (its name is the file name without the extension).

        Its ``extends`` parents are looked up on the search path plus the file's own directory.
        """
        file = Path(path)
        if not file.is_file():
            raise ConfigInvalid(f"{file}: file not found", details={"file": str(file)})
        name = file.stem
        if not NAME_RE.match(name):
            raise ConfigInvalid(
                f"{file}:1: name: the file name {name!r} is not a profile name (lowercase letters, digits, "
                "'.', '_', '-'; at most 64 characters)",
                details={"file": str(file), "line": 1, "fields": ["name"]},
            )
        registry = self.with_dir(file.parent)
        registry._pinned[name] = file  # this very file, whatever else the search path holds
        return registry._load(name, file)

    def load_seccomp(self, name: str) -> SeccompProfile:
        """The seccomp profile ``name`` from ``seccomp/`` on this search path."""
        return load_seccomp(name, search_path=self._dirs)

    def resolve(
        self,
        profile: str | Profile,
        *,
        request_timeout_s: float | None = None,
        caps: ProfileCaps | None = None,
        writable_root: bool = False,
        session: bool = False,
        egress: Sequence[str] = (),
        image: str | None = None,
    ) -> ResolvedProfile:
        """:func:`orchestrator.profiles.resolve` with this registry's profiles and seccomp files."""
        return resolve(
            self.get(profile) if isinstance(profile, str) else profile,
            request_timeout_s=request_timeout_s,
            caps=caps,
            writable_root=writable_root,
            session=session,
            registry=self,
            egress=egress,
            image=image,
        )

    # -- loading -------------------------------------------------------------------------------------
    def _parse(self, path: Path) -> tuple[dict[str, Any], Any]:
        cached = self._parsed.get(path)
        if cached is None:
            data, located = load_yaml_mapping(path, what="a profile")
            cached = (data, located)
            self._parsed[path] = cached
        return cached

    def _load(self, name: str, path: Path) -> Profile:
        return self._defined(name, path, ()).profile

    def _named(self, name: str, path: Path, data: dict[str, Any], located: Any) -> dict[str, Any]:
        given = data.get("name", name)
        if given != name:
            line = located.lines.get(("name",), 1)
            raise ConfigInvalid(
                f"{path}:{line}: name: must equal the file name {name!r} (or be left out)",
                details={"file": str(path), "line": line, "fields": ["name"]},
            )
        return {**data, "name": name}

    def _defined(self, name: str, path: Path, chain: tuple[tuple[str, Path], ...]) -> _Defined:
        """The profile the file ``path`` defines (``name``), with its merged settings and where each comes from.

        Every file of an ``extends`` chain must be valid on its own (what it defines validates), not only
        the end of the chain: a broken file governs nothing, not even the profiles that extend it and set
        the broken value themselves (half of a broken file would otherwise still apply, its other values
        unchecked by anyone). A refusal names the first broken file from the bottom of the chain.
        """
        cached = self._defined_by.get(path)
        if cached is not None:  # loaded whole before: nothing beneath it is broken or a cycle
            return cached
        raw, located = self._parse(path)
        data = self._named(name, path, raw, located)
        source = str(path)
        parent = data.get("extends")
        if parent is None:
            defined = _Defined(validate(Profile, data, located, source), data, _provenance(source, located), (path,))
            self._defined_by[path] = defined
            return defined
        line = located.lines.get(("extends",), 1)

        def refuse(message: str) -> ConfigInvalid:
            return ConfigInvalid(
                f"{source}:{line}: extends: {message}", details={"file": source, "line": line, "fields": ["extends"]}
            )

        if not isinstance(parent, str) or not NAME_RE.match(parent):
            raise refuse("must be the name of another profile")
        if parent == name:  # an override: it builds on the definition it hides
            parent_path = self._overridden(name, path)
            if parent_path is None:
                raise refuse(
                    f"{name!r} is its own name: that means the {name}.yaml this file overrides, in a directory "
                    f"before its own on the search path ({', '.join(str(d) for d in self._dirs)}), and there is "
                    "none: extend another profile, or leave extends: out"
                )
        else:
            try:
                parent_path = self.path_of(parent)
            except ProfileNotFound:
                raise refuse(f"unknown profile {parent!r} (known: {', '.join(self.names()) or 'none'})") from None
        # files, not names, make a cycle: an override and the definition it overrides share a name
        files = [*(p for _, p in chain), path]
        looped = [i for i, p in enumerate(files) if p.resolve() == parent_path.resolve()]
        if looped:
            names = " -> ".join([*(n for n, _ in chain), name, parent])
            raise self._refuse_extends(
                _cycle_maker(files[looped[0] :]),
                f"cycle: {names}; break it: extend a profile that does not lead back here (a file extends its "
                "own name only to build on the definition it overrides, lower on the search path)",
            )
        below = self._defined(parent, parent_path, (*chain, (name, path)))  # valid on its own, or refused
        own = _NOT_INHERITED if parent != name else ("name", "extends")  # an override is the same profile
        inherited = {k: v for k, v in below.data.items() if k not in own}
        merged = _deep_merge(inherited, data)
        provenance = _merge_provenance(below.provenance, _provenance(source, located), data, own)
        profile = _validate_merged(merged, provenance, source, line)
        if parent == name and "description" not in data:  # it keeps the description of what it overrides
            self._check_kept_description(path, below, profile)
        defined = _Defined(profile, merged, provenance, (*below.files, path))
        self._defined_by[path] = defined
        return defined

    def _check_kept_description(self, path: Path, below: _Defined, profile: Profile) -> None:
        """An override keeps the description it overrides only while that is still true of it: one that changes
        what a description says a profile is (:data:`_DESCRIBED`) must give its own."""
        changed = [(loc, _get(below.profile, loc), _get(profile, loc)) for loc in _DESCRIBED]
        changed = [(loc, old, new) for loc, old, new in changed if old != new]
        if not changed:
            return
        _, line = _locate(_provenance(str(path), self._parse(path)[1]), changed[0][0])  # this file set it
        changes = ", ".join(f"{'.'.join(map(str, loc))} ({_said(old)} -> {_said(new)})" for loc, old, new in changed)
        kept_from = below.provenance.get(("description",), below.provenance[()])[0]
        raise ConfigInvalid(
            f"{path}:{line}: description: this override changes {changes}: the description it would keep, from "
            f"{kept_from}, says what the profile it overrides is, not what this one is: give this file its own "
            "description: line",
            details={"file": str(path), "line": line, "fields": ["description"]},
        )

    def _refuse_extends(self, path: Path, message: str) -> ConfigInvalid:
        """CONFIG.INVALID at the ``extends:`` line of ``path`` (read before: it is on the chain)."""
        line = self._parse(path)[1].lines.get(("extends",), 1)
        return ConfigInvalid(
            f"{path}:{line}: extends: {message}", details={"file": str(path), "line": line, "fields": ["extends"]}
        )

    def _overridden(self, name: str, path: Path) -> Path | None:
        """The definition of ``name`` that ``path`` hides: the last one in the directories before its own (each
        directory is on the search path once, at the place where it wins names)."""
        here = path.parent.resolve()
        below = list(self._dirs)
        for index, directory in enumerate(self._dirs):
            if directory.resolve() == here:
                below = list(self._dirs[:index])
                break
        return find_in(below, f"{name}.yaml")
