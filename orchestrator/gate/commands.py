"""Command patterns for denylists, allowlists and rules: ``"rm -rf"``, ``"git push --force"``, ``"mkfs*"``.

A pattern is split like a shell would (``shlex``) into a program, flags and positionals:

* **program** - the basename of argv[0] (``/bin/rm`` and ``\\rm`` are ``rm``); the pattern's program
  may be an ``fnmatch`` glob (``mkfs*``, ``python3*``), case-sensitive. ``CommandPattern.program`` is
  the name to index on, or ``"*"`` for a glob.
* **flags** - every flag of the pattern must be present in the command, in any spelling: bundled or
  separate short flags (``-rf`` = ``-fr`` = ``-r -f`` = ``-rfv``), long flags (``--force``, a value
  after ``=`` is ignored), unambiguous GNU-style abbreviations of the long flags listed below
  (``--recur``), and the equivalences of ``FLAG_TABLE``. Flags not in the table must be spelled the
  same (a short flag stays case-sensitive: ``-r`` is not ``-R`` unless the table says so).
* **positionals** - the pattern's positionals must be a prefix of the command's positionals (words
  that are not flags, and not values of the options of ``VALUE_OPTIONS``; ``--`` ends flags).
  Positionals are compared literally (``rm -rf /*`` means the literal word ``/*``).

Programs with subcommands (``git``): the first positional selects a second table (``git push``), the
global options before it (``-C DIR``, ``-c K=V``…) are skipped. For ``git push`` a ``+refspec``
positional counts as ``--force``.

The flag table (spelling → canonical name; names listed share one meaning):

=============  ==========================================================================
rm             -r -R --recursive; -f --force; -i --interactive; -I; -d --dir; -v --verbose
chmod          -R --recursive; -v --verbose; -c --changes; -f --silent --quiet
chown, chgrp   as chmod, plus -h --no-dereference
cp             -r -R --recursive; -f --force; -a --archive; -i --interactive; -n --no-clobber;
               -u --update; -v --verbose; -l --link; -s --symbolic-link; -b --backup;
               -L --dereference; -P --no-dereference; -x --one-file-system
mv             -f --force; -i --interactive; -n --no-clobber; -u --update; -v --verbose; -b --backup
git push       -f --force --force-with-lease (all: force); -d --delete; -u --set-upstream;
               -n --dry-run; -v --verbose; -q --quiet; +refspec → force
git clean      -f --force; -d; -x; -X; -n --dry-run; -i --interactive; -q --quiet
git reset      --hard; --soft; --mixed; --merge; --keep; -q --quiet
git checkout   -f --force; git branch: -d --delete, -D = --delete --force, -f --force
=============  ==========================================================================

Programs whose options run programs or write files (the risk analyzer's ``DANGEROUS_OPTIONS``) are
in the table too, so that every spelling of those options (``-o`` = ``--output`` = ``--out``, bundled
``-uo``, attached ``-ofile``) reaches the same canonical name: ``sort``, ``uniq``, ``tar``, ``rsync``,
``date``, ``file``, ``sed``, ``sdiff`` and the git subcommands ``diff log show whatchanged
format-patch diff-tree diff-index diff-files range-diff stash cat-file clone fetch pull ls-remote
archive send-pack rebase difftool grep send-email``. Long options of GNU tools may be abbreviated; a
table lists a subset of a program's options, so an abbreviation it resolves that the program would
find ambiguous only errs towards the dangerous reading.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "FLAG_TABLE",
    "VALUE_OPTIONS",
    "CommandPattern",
    "ParsedCommand",
    "ShellInvocation",
    "parse_command",
    "program_name",
    "resolve_long",
    "scan_shell_options",
]

_GLOB_CHARS = frozenset("*?[")


def _table(*groups: tuple[str, ...] | str) -> dict[str, tuple[str, ...]]:
    """Each group: spellings sharing a meaning; the canonical name is the first long spelling."""
    out: dict[str, tuple[str, ...]] = {}
    for group in groups:
        spellings = (group,) if isinstance(group, str) else group
        longs = [s for s in spellings if s.startswith("--")]
        canonical = longs[0] if longs else spellings[0]
        for spelling in spellings:
            out[spelling] = (canonical,)
    return out


_CHMOD = _table(
    ("-R", "--recursive"),
    ("-v", "--verbose"),
    ("-c", "--changes"),
    ("-f", "--silent", "--quiet"),
    "--reference",
    "--preserve-root",
    "--no-preserve-root",
    "--help",
    "--version",
)

# git subcommands that take the diff options (and so --output, --ext-diff, --textconv)
GIT_DIFF_FAMILY = (
    "git diff",
    "git log",
    "git show",
    "git whatchanged",
    "git format-patch",
    "git diff-tree",
    "git diff-index",
    "git diff-files",
    "git range-diff",
    "git stash",
)
_GIT_DIFF = _table(
    "--output",
    "--output-indicator-new",
    "--output-indicator-old",
    "--output-indicator-context",
    ("--ext-diff",),
    "--no-ext-diff",
    "--textconv",
    "--no-textconv",
    "--no-index",
    ("-p", "-u", "--patch"),
)

FLAG_TABLE: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "rm": _table(
        ("-r", "-R", "--recursive"),
        ("-f", "--force"),
        ("-i", "--interactive"),
        "-I",
        ("-d", "--dir"),
        ("-v", "--verbose"),
        "--one-file-system",
        "--no-preserve-root",
        "--preserve-root",
        "--help",
        "--version",
    ),
    "chmod": _CHMOD,
    "chown": {**_CHMOD, **_table(("-h", "--no-dereference"), "--dereference", "--from")},
    "chgrp": {**_CHMOD, **_table(("-h", "--no-dereference"), "--dereference")},
    "cp": _table(
        ("-r", "-R", "--recursive"),
        ("-f", "--force"),
        ("-a", "--archive"),
        ("-i", "--interactive"),
        ("-n", "--no-clobber"),
        ("-u", "--update"),
        ("-v", "--verbose"),
        ("-l", "--link"),
        ("-s", "--symbolic-link"),
        ("-b", "--backup"),
        ("-L", "--dereference"),
        ("-P", "--no-dereference"),
        ("-x", "--one-file-system"),
        ("-t", "--target-directory"),
        ("-T", "--no-target-directory"),
        ("-S", "--suffix"),
        "--remove-destination",
        "--parents",
        "--preserve",
        "--no-preserve",
        "--reflink",
        "--sparse",
        "--attributes-only",
        "--strip-trailing-slashes",
        "--copy-contents",
    ),
    "mv": _table(
        ("-f", "--force"),
        ("-i", "--interactive"),
        ("-n", "--no-clobber"),
        ("-u", "--update"),
        ("-v", "--verbose"),
        ("-b", "--backup"),
        ("-t", "--target-directory"),
        ("-T", "--no-target-directory"),
        ("-S", "--suffix"),
        "--strip-trailing-slashes",
        "--no-copy",
        "--exchange",
    ),
    "git": _table(
        ("-p", "--paginate"),
        ("-P", "--no-pager"),
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--bare",
        "--exec-path",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--config-env",
        "--version",
        "--help",
    ),
    "git push": {
        **_table(
            ("-d", "--delete"),
            ("-u", "--set-upstream"),
            ("-n", "--dry-run"),
            ("-v", "--verbose"),
            ("-q", "--quiet"),
            ("-o", "--push-option"),
            "--all",
            "--mirror",
            "--tags",
            "--follow-tags",
            "--atomic",
            "--no-verify",
            "--prune",
            "--porcelain",
            "--repo",
            "--receive-pack",
            "--exec",
            "--force-if-includes",
            "--signed",
            "--thin",
        ),
        "-f": ("--force",),
        "--force": ("--force",),
        "--force-with-lease": ("--force",),
    },
    "git clean": _table(
        ("-f", "--force"),
        "-d",
        "-x",
        "-X",
        ("-n", "--dry-run"),
        ("-i", "--interactive"),
        ("-q", "--quiet"),
        ("-e", "--exclude"),
    ),
    "git reset": _table("--hard", "--soft", "--mixed", "--merge", "--keep", ("-q", "--quiet"), ("-p", "--patch"), "-N"),
    "git checkout": _table(("-f", "--force"), ("-q", "--quiet"), "-b", "-B", ("-p", "--patch")),
    "git branch": {
        **_table(("-f", "--force"), ("-m", "--move"), "-M", ("-c", "--copy"), "-C"),
        "-d": ("--delete",),
        "--delete": ("--delete",),
        "-D": ("--delete", "--force"),
    },
    **dict.fromkeys(GIT_DIFF_FAMILY, _GIT_DIFF),
    "git cat-file": _table("--textconv", "--filters"),
    "git clone": _table(("-u", "--upload-pack"), "--template", ("-c", "--config"), "--bare", "--mirror"),
    "git fetch": _table("--upload-pack", ("-u", "--update-head-ok")),
    "git pull": _table("--upload-pack"),
    "git ls-remote": _table("--upload-pack"),
    "git archive": _table("--exec", ("-o", "--output"), "--remote"),
    "git send-pack": _table(("--receive-pack", "--exec")),
    "git rebase": _table(("-x", "--exec"), ("-i", "--interactive")),
    "git difftool": _table(("-x", "--extcmd"), ("-t", "--tool")),
    "git grep": _table(("-O", "--open-files-in-pager")),
    "git send-email": _table("--sendmail-cmd", "--smtp-server", "--to-cmd", "--cc-cmd", "--header-cmd"),
    "sort": _table(
        ("-o", "--output"),
        "--compress-program",
        ("-c", "--check"),
        ("-C",),
        ("-T", "--temporary-directory"),
        ("-k", "--key"),
        ("-t", "--field-separator"),
        ("-S", "--buffer-size"),
        ("-m", "--merge"),
        ("-u", "--unique"),
        ("-r", "--reverse"),
        ("-n", "--numeric-sort"),
        "--files0-from",
        "--random-source",
        "--parallel",
        "--debug",
    ),
    "uniq": _table(
        ("-f", "--skip-fields"),
        ("-s", "--skip-chars"),
        ("-w", "--check-chars"),
        ("-c", "--count"),
        ("-d", "--repeated"),
        ("-D", "--all-repeated"),
        ("-u", "--unique"),
        ("-i", "--ignore-case"),
        ("-z", "--zero-terminated"),
        "--group",
    ),
    "tar": _table(
        "--to-command",
        "--to-stdout",
        ("-I", "--use-compress-program"),
        "--checkpoint",
        "--checkpoint-action",
        ("-F", "--info-script", "--new-volume-script"),
        "--rsh-command",
        "--rmt-command",
        ("-f", "--file"),
        ("-C", "--directory"),
        ("-x", "--extract", "--get"),
        ("-c", "--create"),
        ("-t", "--list"),
        ("-P", "--absolute-names"),
    ),
    "rsync": _table(("-e", "--rsh"), "--rsync-path"),
    "wget": _table("--use-askpass"),
    "date": _table(
        ("-s", "--set"),
        ("-d", "--date"),
        ("-f", "--file"),
        ("-r", "--reference"),
        ("-u", "--utc", "--universal"),
        ("-R", "--rfc-email"),
        ("-I", "--iso-8601"),
        "--rfc-3339",
        "--debug",
        "--resolution",
    ),
    "file": _table(
        ("-C", "--compile"),
        ("-m", "--magic-file"),
        ("-f", "--files-from"),
        ("-F", "--separator"),
        ("-e", "--exclude"),
        ("-P", "--parameter"),
        ("-b", "--brief"),
        ("-i", "--mime"),
        ("-z", "--uncompress"),
        ("-Z", "--uncompress-noreport"),
        ("-L", "--dereference"),
        ("-h", "--no-dereference"),
    ),
    "sed": _table(
        ("-e", "--expression"),
        ("-f", "--file"),
        ("-i", "--in-place"),
        ("-n", "--quiet", "--silent"),
        ("-l", "--line-length"),
        ("-E", "-r", "--regexp-extended"),
        ("-s", "--separate"),
        ("-z", "--null-data", "--zero-terminated"),
        ("-u", "--unbuffered"),
        ("-b", "--binary"),
        "--sandbox",
        "--posix",
        "--debug",
        "--follow-symlinks",
        "--help",
        "--version",
    ),
    "sdiff": _table(("-o", "--output"), "--diff-program"),
}
"""Per program (``"git push"`` for a subcommand): flag spelling → canonical names."""

VALUE_OPTIONS: Mapping[str, frozenset[str]] = {
    "git": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}),
    "git push": frozenset({"-o", "--push-option", "--repo", "--receive-pack", "--exec"}),
    "git clean": frozenset({"-e", "--exclude"}),
    "git checkout": frozenset({"-b", "-B", "--orphan"}),
    "cp": frozenset({"-t", "--target-directory", "-S", "--suffix"}),
    "mv": frozenset({"-t", "--target-directory", "-S", "--suffix"}),
    "chown": frozenset({"--from", "--reference"}),
    "chmod": frozenset({"--reference"}),
    "chgrp": frozenset({"--reference"}),
    "kill": frozenset({"-s", "-n"}),
    "git clone": frozenset({"-u", "--upload-pack", "--template", "-c", "--config", "-o", "--origin", "-b", "--branch"}),
    "git fetch": frozenset({"--upload-pack"}),
    "git pull": frozenset({"--upload-pack"}),
    "git ls-remote": frozenset({"--upload-pack"}),
    "git archive": frozenset({"--exec", "-o", "--output", "--remote", "--format", "--prefix"}),
    "git rebase": frozenset({"-x", "--exec", "--onto", "-s", "--strategy", "-X", "--strategy-option"}),
    "git difftool": frozenset({"-x", "--extcmd", "-t", "--tool"}),
    "sort": frozenset(
        {"-o", "--output", "-k", "--key", "-t", "--field-separator", "-S", "--buffer-size", "-T"}
        | {"--temporary-directory", "--compress-program", "--files0-from", "--random-source", "--parallel"}
    ),
    "uniq": frozenset({"-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"}),
    "tar": frozenset(
        {"-f", "--file", "-C", "--directory", "-I", "--use-compress-program", "-F", "--info-script"}
        | {"--new-volume-script", "-T", "--files-from", "-X", "--exclude-from", "-b", "--blocking-factor"}
        | {"-g", "--listed-incremental", "-H", "--format", "-K", "--starting-file", "-L", "--tape-length"}
        | {"-N", "--newer", "--after-date", "-V", "--label", "--to-command", "--rsh-command", "--rmt-command"}
    ),
    "rsync": frozenset({"-e", "--rsh", "--rsync-path"}),
    "date": frozenset({"-d", "--date", "-f", "--file", "-r", "--reference", "-s", "--set"}),
    "file": frozenset(
        {"-m", "--magic-file", "-f", "--files-from", "-F", "--separator", "-e", "--exclude", "-P", "--parameter"}
    ),
    "sed": frozenset({"-e", "--expression", "-f", "--file", "-l", "--line-length"}),
    "sdiff": frozenset({"-o", "--output", "--diff-program"}),
}
"""Options whose value is the next word (so it is not a positional)."""

_SUBCOMMAND_PROGRAMS = frozenset({"git"})
_EMPTY_TABLE: Mapping[str, tuple[str, ...]] = {}
_NO_VALUES: frozenset[str] = frozenset()


def _longs(table: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(s for s in table if s.startswith("--"))


_LONGS = {key: _longs(table) for key, table in FLAG_TABLE.items()}


def resolve_long(key: str, name: str) -> tuple[str, ...]:
    """The canonical names of long option ``name`` (no ``=value``) for ``key`` (``"sed"``,
    ``"git diff"``): exact spellings, then unambiguous abbreviations; ``(name,)`` if unknown."""
    return _resolve_long(name, key)


def program_name(words: Sequence[str]) -> str:
    """Basename of argv[0] with quotes and backslashes removed: ``/bin/rm`` → ``rm``, ``\\rm`` → ``rm``."""
    if not words:
        return ""
    word = words[0]
    if "'" in word or '"' in word or "\\" in word:
        word = word.replace("\\", "").replace("'", "").replace('"', "")
    return word.rsplit("/", 1)[-1]


_new_tuple = tuple.__new__


class ShellInvocation(NamedTuple):
    """What a shell's (``sh``, ``bash``, ``zsh``, ``fish``…) options say about its command line.

    ``operand`` is the index of the first word after the options - the ``-c`` string when ``dash_c``
    or ``long_command``, else the script - or None when there is none. ``dash_c``: a short option
    bundle with ``c`` (``-c``, ``-ec``); ``long_command``: fish's ``--command``; ``dash_s``: a short
    bundle with ``s`` (commands from stdin); ``info``: ``--version`` or ``--help``. A NamedTuple, not a
    frozen dataclass: it is built for every shell command checked, and a tuple is faster to build.
    """

    operand: int | None
    dash_c: bool
    long_command: bool
    dash_s: bool
    info: bool


def scan_shell_options(words: Sequence[str]) -> ShellInvocation:
    """Scan the options of the shell command ``words`` (``words[0]`` is the shell).

    ``--`` and ``-`` end the options; ``--rcfile``/``--init-file`` take the next word; other long
    options take none; a word not starting with ``-``/``+`` (or a lone ``+``) is the first operand;
    a short bundle (``-xc``, ``+e``) with ``o`` or ``O`` takes the next word (``-o pipefail``)."""
    n = len(words)
    i = 1
    dash_c = long_command = dash_s = info = False
    while i < n:
        w = words[i]
        if w[:1] == "-":
            if w in ("--", "-"):
                i += 1
                break
            if w[1] == "-":
                if w in ("--rcfile", "--init-file"):
                    i += 1
                elif w == "--command":
                    long_command = True
                elif w in ("--version", "--help"):
                    info = True
                i += 1
                continue
            if "c" in w:
                dash_c = True
            if "s" in w:
                dash_s = True
        elif w[:1] != "+" or w == "+":
            break
        if "o" in w or "O" in w:
            i += 1
        i += 1
    # tuple.__new__ skips the NamedTuple's Python-level __new__ (a third of the scan's time)
    return _new_tuple(ShellInvocation, (i if i < n else None, dash_c, long_command, dash_s, info))


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command's words split into program, canonical flags and positionals."""

    program: str
    flags: frozenset[str]
    positionals: tuple[str, ...]


def _resolve_long(name: str, key: str) -> tuple[str, ...]:
    table = FLAG_TABLE.get(key, _EMPTY_TABLE)
    found = table.get(name)
    if found is not None:
        return found
    if len(name) >= 3:
        hits = {table[s] for s in _LONGS.get(key, ()) if s.startswith(name)}
        if len(hits) == 1:
            return hits.pop()
    return (name,)


def parse_command(words: Sequence[str], program: str | None = None) -> ParsedCommand:
    """Split ``words`` (argv) into program, canonical flags and positionals (see the module doc)."""
    prog = program_name(words) if program is None else program
    key = prog
    table = FLAG_TABLE.get(key, _EMPTY_TABLE)
    values = VALUE_OPTIONS.get(key, _NO_VALUES)
    subcommands = prog in _SUBCOMMAND_PROGRAMS
    flags: set[str] = set()
    positionals: list[str] = []
    n = len(words)
    i = 1
    only_positionals = False
    while i < n:
        w = words[i]
        i += 1
        if only_positionals or len(w) < 2 or w[0] != "-":
            if subcommands and not positionals:
                key = f"{prog} {w}"
                table = FLAG_TABLE.get(key, _EMPTY_TABLE)
                values = VALUE_OPTIONS.get(key, _NO_VALUES)
            elif key == "git push" and w.startswith("+") and len(w) > 1:
                flags.add("--force")
            positionals.append(w)
            continue
        if w == "--":
            only_positionals = True
            continue
        if w[1] == "-":
            name, eq, _ = w.partition("=")
            flags.update(_resolve_long(name, key))
            if not eq and name in values:
                i += 1
            continue
        for j in range(1, len(w)):
            spelling = "-" + w[j]
            if spelling in values:
                if j == len(w) - 1:
                    i += 1
                flags.update(table.get(spelling, (spelling,)))
                break
            flags.update(table.get(spelling, (spelling,)))
    return ParsedCommand(prog, frozenset(flags), tuple(positionals))


@dataclass(frozen=True, slots=True)
class CommandPattern:
    """A command pattern such as ``"rm -rf"``; see the module docstring for the matching rules."""

    text: str
    _program: str = field(init=False, repr=False, compare=False)
    _glob: bool = field(init=False, repr=False, compare=False)
    _flags: frozenset[str] = field(init=False, repr=False, compare=False)
    _positionals: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _words: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            words = shlex.split(self.text)
        except ValueError as err:
            raise ValueError(f"invalid command pattern {self.text!r}: {err}") from None
        if not words:
            raise ValueError("command pattern is empty")
        prog = program_name(words)
        if not prog:
            raise ValueError(f"invalid command pattern {self.text!r}: no program name")
        glob = any(ch in _GLOB_CHARS for ch in prog)
        parsed = parse_command(words, prog)
        object.__setattr__(self, "_program", prog)
        object.__setattr__(self, "_glob", glob)
        object.__setattr__(self, "_flags", parsed.flags)
        object.__setattr__(self, "_positionals", parsed.positionals)
        object.__setattr__(self, "_words", tuple(words))

    @classmethod
    def parse(cls, text: str) -> CommandPattern:
        """Parse a pattern; raises ValueError (with the pattern in the message) when it is empty or
        cannot be split."""
        return cls(text)

    @property
    def program(self) -> str:
        """The program name this pattern keys on, or ``"*"`` when the program is a glob."""
        return "*" if self._glob else self._program

    @property
    def program_glob(self) -> str:
        """The program as written in the pattern (a name or an fnmatch glob)."""
        return self._program

    @property
    def flags(self) -> frozenset[str]:
        return self._flags

    @property
    def positionals(self) -> tuple[str, ...]:
        return self._positionals

    def program_matches(self, program: str) -> bool:
        if self._glob:
            return fnmatch.fnmatchcase(program, self._program)
        return program == self._program

    def matches(self, words: Sequence[str]) -> bool:
        """Whether the command ``words`` (an argv) matches this pattern."""
        if not words or not self.program_matches(program_name(words)):
            return False
        if not self._flags and not self._positionals:
            return True
        return self.matches_parsed(parse_command(words))

    def matches_parsed(self, parsed: ParsedCommand) -> bool:
        """Like ``matches`` for a command already split with ``parse_command``."""
        if not self.program_matches(parsed.program):
            return False
        flags = self._flags
        if self._glob and flags:
            # a glob pattern's flags are read with the matched program's table
            flags = parse_command(self._words, parsed.program).flags
        if not flags <= parsed.flags:
            return False
        size = len(self._positionals)
        return size == 0 or parsed.positionals[:size] == self._positionals
