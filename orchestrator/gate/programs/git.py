"""git: global options, then a subcommand with options of its own.

Listed are the subcommands whose options change what runs or what is written, or that patterns and
risk checks read (``git push --force``, ``git diff --output``, ``git clone --upload-pack``). The global
``-c KEY=VALUE`` is read by the locator ``git_config`` (a key that names a program makes its value a
command) and by the risk check; subcommand options whose value is run are marked ``runs``.
"""

from __future__ import annotations

import re

from orchestrator.gate.programs.build import HIGH, MEDIUM, RUNS, WRITES, attached, flag, info, value
from orchestrator.gate.programs.model import Command, Family, Locate, Opt, Program, Runs, Takes

T = Family.TOOL
_TEXTCONV = (MEDIUM, "runs the text conversion filters of the configuration")
_UPLOAD_PACK = value("-u", "--upload-pack", runs=Runs.SHELL, risk=(HIGH, RUNS))


def _sub(names: str, *options: Opt, plus_operand: str = "") -> dict[str, Program]:
    program = Program(
        tuple(f"git {n}" for n in names.split()), "a git subcommand", T, options=options, plus_operand=plus_operand
    )
    return dict.fromkeys(names.split(), program)


DIFF_FAMILY = "diff log show whatchanged format-patch diff-tree diff-index diff-files range-diff stash"
"""git subcommands that take the diff options (and so --output, --ext-diff, --textconv)."""

SUBCOMMANDS: dict[str, Program] = {
    **_sub(
        "push",
        flag("-f", "--force", "--force-with-lease", means=("--force",)),
        flag("-d", "--delete"),
        flag("-u", "--set-upstream"),
        flag("-n", "--dry-run"),
        flag("-v", "--verbose"),
        flag("-q", "--quiet"),
        value("-o", "--push-option"),
        *(
            flag(long)
            for long in [
                "--all",
                "--mirror",
                "--tags",
                "--follow-tags",
                "--atomic",
                "--no-verify",
                "--prune",
                "--porcelain",
            ]
        ),
        flag("--force-if-includes"),
        attached("--signed"),
        flag("--thin"),
        value("--repo"),
        value("--receive-pack", "--exec", runs=Runs.SHELL, risk=(HIGH, RUNS)),
        plus_operand="--force",
    ),
    **_sub(
        "clean",
        flag("-f", "--force"),
        flag("-d"),
        flag("-x"),
        flag("-X"),
        flag("-n", "--dry-run"),
        flag("-i", "--interactive"),
        flag("-q", "--quiet"),
        value("-e", "--exclude"),
    ),
    **_sub(
        "reset",
        *(flag(long) for long in ["--hard", "--soft", "--mixed", "--merge", "--keep"]),
        flag("-q", "--quiet"),
        flag("-p", "--patch"),
        flag("-N"),
    ),
    **_sub(
        "checkout",
        flag("-f", "--force"),
        flag("-q", "--quiet"),
        value("-b"),
        value("-B"),
        value("--orphan"),
        flag("-p", "--patch"),
    ),
    **_sub(
        "branch",
        flag("-f", "--force"),
        flag("-m", "--move"),
        flag("-M"),
        flag("-c", "--copy"),
        flag("-C"),
        flag("-d", "--delete"),
        flag("-D", means=("--delete", "--force")),
    ),
    **_sub(
        DIFF_FAMILY,
        value("--output", risk=(HIGH, WRITES)),
        value("--output-indicator-new"),
        value("--output-indicator-old"),
        value("--output-indicator-context"),
        flag("--ext-diff", risk=(HIGH, "runs the external diff program of the configuration")),
        flag("--no-ext-diff"),
        flag("--textconv", risk=_TEXTCONV),
        flag("--no-textconv"),
        flag("--no-index"),
        flag("-p", "-u", "--patch"),
    ),
    **_sub(
        "cat-file",
        flag("--textconv", risk=_TEXTCONV),
        flag("--filters", risk=(MEDIUM, "runs the filters of the configuration")),
    ),
    **_sub(
        "clone",
        _UPLOAD_PACK,
        value("--template", risk=(HIGH, "installs hooks from a template directory")),
        value("-c", "--config", risk=(HIGH, "sets configuration that can run programs")),
        flag("--bare"),
        flag("--mirror"),
        value("-o", "--origin"),
        value("-b", "--branch"),
    ),
    **_sub("fetch", value("--upload-pack", runs=Runs.SHELL, risk=(HIGH, RUNS)), flag("-u", "--update-head-ok")),
    **_sub("pull ls-remote", value("--upload-pack", runs=Runs.SHELL, risk=(HIGH, RUNS))),
    **_sub(
        "archive",
        value("--exec", risk=(HIGH, RUNS)),
        value("-o", "--output", risk=(HIGH, WRITES)),
        value("--remote"),
        value("--format"),
        value("--prefix"),
    ),
    **_sub("send-pack", value("--receive-pack", "--exec", runs=Runs.SHELL, risk=(HIGH, RUNS))),
    **_sub(
        "rebase",
        value("-x", "--exec", runs=Runs.SHELL, risk=(HIGH, "runs a command after each commit")),
        flag("-i", "--interactive"),
        value("--onto"),
        value("-s", "--strategy"),
        value("-X", "--strategy-option"),
    ),
    **_sub("difftool", value("-x", "--extcmd", runs=Runs.SHELL, risk=(HIGH, RUNS)), value("-t", "--tool")),
    **_sub("grep", Opt(("-O", "--open-files-in-pager"), Takes.ATTACHED, runs=Runs.SHELL, risk=(HIGH, RUNS))),
    **_sub(
        "send-email",
        *(
            value(long, runs=Runs.SHELL, risk=(HIGH, RUNS))
            for long in ["--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"]
        ),
        value("--smtp-server", risk=(HIGH, RUNS)),
    ),
}

GIT = Program(
    ("git",),
    "git: global options, then a subcommand (-c KEY=VALUE may name a program to run)",
    T,
    options=(
        flag("-p", "--paginate"),
        flag("-P", "--no-pager"),
        value("-C"),
        value("-c"),
        value("--git-dir"),
        value("--work-tree"),
        value("--namespace"),
        value("--super-prefix"),
        value("--config-env"),
        value("--shallow-file"),
        value("--attr-source"),
        Opt(("--list-cmds",), Takes.ATTACHED, stop=True),  # --list-cmds=GROUP only: lists and exits
        attached("--exec-path"),
        *(
            flag(long)
            for long in [
                "--bare",
                "--no-replace-objects",
                "--literal-pathspecs",
                "--no-literal-pathspecs",
                "--glob-pathspecs",
                "--noglob-pathspecs",
                "--icase-pathspecs",
                "--no-optional-locks",
                "--no-lazy-fetch",
                "--no-advice",
                "--html-path",
                "--man-path",
                "--info-path",
            ]
        ),
        info("--version", "-v", "--help", "-h"),
    ),
    permute=False,
    abbreviate=False,
    subcommands=SUBCOMMANDS,
    command=Command(Locate.CUSTOM, handler="git_config"),
    check="git",
)

SAFE_CONFIG = re.compile(
    r"(?:color|column|advice|i18n)\.[\w.-]+"
    r"|core\.(?:quotepath|abbrev|autocrlf|safecrlf|filemode|ignorecase|eol|whitespace)"
    r"|log\.(?:date|decorate|abbrevcommit)|diff\.(?:noprefix|renames|mnemonicprefix|relative|algorithm|context)"
    r"|user\.(?:name|email)|init\.defaultbranch|pull\.(?:rebase|ff)|push\.default|fetch\.prune"
    r"|commit\.(?:verbose|cleanup|gpgsign)|tag\.gpgsign|merge\.(?:ff|conflictstyle)|rebase\.autostash|status\.\w+"
    r"|http\.[\w.:/-]+|(?:fetch|pull|push|pack|gc|index|feature|maintenance)\.\w+|submodule\.recurse"
    r"|core\.(?:longpaths|symlinks|precomposeunicode|checkstat|trustctime|preloadindex|untrackedcache)",
    re.IGNORECASE,
)
"""``git -c`` keys that only change output or plain behaviour; any other key may run a program."""

COMMAND_CONFIG = re.compile(
    r"core\.(?:fsmonitor|pager|editor|sshcommand|askpass|gitproxy|alternaterefscommand)"
    r"|diff\.external|(?:diff|merge|filter)\..+\.(?:textconv|command|driver|clean|smudge|process)"
    r"|alias\..+|credential\..*helper|sequence\.editor|gpg\..*program|pager\..+|uploadpack\.packobjectshook"
    r"|remote\..+\.(?:uploadpack|receivepack|proxy)|(?:difftool|mergetool|man)\..+\.(?:cmd|path)"
    r"|(?:browser|instaweb|sendemail)\..+|web\.browser|submodule\..+\.update",
    re.IGNORECASE,
)
"""Keys whose value is a command git runs (aliases, credential helpers and submodule updates only
when the value starts with ``!``)."""

EXEC_CONFIG = re.compile(
    COMMAND_CONFIG.pattern
    + r"|core\.(?:hookspath|worktree)|(?:diff|merge|filter)\..+|protocol\..+|include\.path|includeif\..+"
    r"|safe\.directory|ssh\.variant",
    re.IGNORECASE,
)
"""Keys whose value is a program, or that pull in configuration, hooks or repositories that can."""
