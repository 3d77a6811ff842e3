"""Programs that run another command, continued: tracing, environment, multiplexers, dynamic loaders,
runners, and the shell's own builtins. Same rules as ``wrappers``: the options before the command
must be complete, or the gate cannot tell where the command starts and says so.
"""

from __future__ import annotations

from orchestrator.gate.programs.build import HIGH, attached, flag, help_version, info, names, stop, value
from orchestrator.gate.programs.model import Command, Family, Locate, Program, Runs, Takes
from orchestrator.gate.programs.wrappers import ARGV, SHELL_DEFAULT, W

_VALGRIND_OPTIONS = names(
    "tool trace-children trace-children-skip trace-children-skip-by-arg child-silent-after-fork vgdb vgdb-error"
    " vgdb-stop-at track-fds time-stamp log-fd log-file log-socket xml xml-fd xml-file xml-socket xml-user-comment"
    " demangle num-callers error-limit exit-on-first-error error-exitcode error-markers show-error-list"
    " keep-debuginfo show-below-main default-suppressions suppressions gen-suppressions input-fd dsymutil"
    " max-stackframe main-stacksize alignment redzone-size xtree-memory xtree-memory-file fullpath-after"
    " extra-debuginfo-path debuginfo-server allow-mismatched-debuginfo smc-check read-inline-info read-var-info"
    " vgdb-poll vgdb-shadow-registers vgdb-prefix run-libc-freeres run-cxx-freeres sim-hints fair-sched"
    " kernel-variant merge-recursive-frames num-transtab-sectors avg-transtab-entry-size aspace-minaddr"
    " valgrind-stacksize show-emwarns require-text-symbol soname-synonyms sigill-diagnostics unw-stack-scan-thresh"
    " unw-stack-scan-frames resync-filter max-threads"
    # memcheck, the default tool
    " leak-check leak-resolution show-leak-kinds errors-for-leak-kinds leak-check-heuristics show-reachable"
    " show-possibly-lost xtree-leak xtree-leak-file undef-value-errors track-origins partial-loads-ok"
    " expensive-definedness-checks freelist-vol freelist-big-blocks workaround-gcc296-bugs ignore-ranges"
    " ignore-range-below-sp malloc-fill free-fill keep-stacktraces show-mismatched-frees"
)
"""valgrind's core and memcheck options, as ``valgrind --help`` (3.19) lists them; other tools' options
are not listed (the gate asks)."""

TRACING: tuple[Program, ...] = (
    Program(
        names("strace"),
        "trace the system calls of a command (-o '|CMD' pipes the trace to a command)",
        W,
        options=(
            # as strace.c's optstring ("+a:Ab:cCdDe:E:fFhiI:knNo:O:p:P:qrs:S:tTu:U:vVwxX:yYzZ") and
            # struct option longopts (strace 6.1 and the current source) have them
            *(value(f"-{c}") for c in "abEIOPsSuUX"),
            value("-e"),
            value("-o", "--output", runs=Runs.PIPE),
            stop("-p", "--attach", takes=Takes.VALUE),
            *(flag(f"-{c}") for c in "AcCdDfFiknNqrtTvwxyYzZ"),
            *(
                value(long)
                for long in names(
                    "--trace --signals --status --inject --fault --user --env --string-limit --columns"
                    " --summary-sort-by --summary-columns --summary-syscall-overhead --interruptible --detach-on"
                    " --trace-path --trace-fds --abbrev --verbose --raw --read --write --const-print-style --kvm"
                    " --argv0 --decode-pids --syscall-limit --stack-trace-frame-limit --color"
                )
            ),
            *(
                attached(long)
                for long in names(
                    "--quiet --silent --silence --decode-fds --absolute-timestamps --relative-timestamps"
                    " --timestamps --syscall-times --daemonize --daemonised --daemonized --secontext --tips"
                    " --stack-trace --stack-traces --strings-in-hex --namespace"
                )
            ),
            *(
                flag(long)
                for long in names(
                    "--follow-forks --output-separately --output-append-mode --summary-only --summary"
                    " --seccomp-bpf --kill-on-exit --successful-only --failed-only --failing-only --debug"
                    " --no-abbrev --instruction-pointer --syscall-number --summary-wall-clock --pidns-translation"
                    " --always-show-pid --arg-names"
                )
            ),
            info("-h", "--help"),
            info("-V", "--version"),
        ),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("ltrace"),
        "trace the library calls of a command",
        W,
        options=(
            value("-a", "--align"),
            value("-A"),
            flag("-b", "--no-signals"),
            flag("-c"),
            flag("-C", "--demangle"),
            value("-D", "--debug"),
            value("-e"),
            flag("-f"),
            value("-F", "--config"),
            flag("-i"),
            value("-l", "--library"),
            flag("-L"),
            value("-n", "--indent"),
            value("-o", "--output"),
            stop("-p", takes=Takes.VALUE),
            flag("-r"),
            value("-s"),
            flag("-S"),
            flag("-t"),
            flag("-T"),
            value("-u"),
            value("-w", "--where"),
            value("-x"),
            info("-h", "--help"),
            info("-V", "--version"),
        ),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("valgrind"),
        "run a program under a dynamic analysis tool (options are --name=value, one word each)",
        W,
        options=(
            # valgrind never takes an option's value from the next word: --log-file FILE runs FILE
            attached("--db-command", runs=Runs.SHELL),
            *(attached(f"--{name}") for name in _VALGRIND_OPTIONS),
            flag("-q", "--quiet"),
            flag("-v", "--verbose"),
            flag("-s"),
            flag("-d"),
            info("-h", "--help", "--help-debug", "--help-dyn-options"),
            info("--version"),
        ),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(
        names("gdb gdb-multiarch"),
        "debugger: runs debugger commands (from -ex, -x or its input) that can run any program",
        W,
        options=(
            # gdb reads options with getopt_long_only: every name takes one dash or two
            *(
                value(*(f"{dashes}{name}" for name in names(synonyms) for dashes in ("-", "--")), runs=runs)
                for synonyms, runs in (
                    ("ex eval-command", Runs.CODE),
                    ("iex init-eval-command", Runs.CODE),
                    ("eiex early-init-eval-command", Runs.CODE),
                    ("x command", Runs.LOAD),
                    ("ix init-command", Runs.LOAD),
                    ("eix early-init-command", Runs.LOAD),
                )
            ),
            flag("--args", "-args"),
            *(
                flag(f"-{name}", f"--{name}")
                for name in names(
                    "batch batch-silent q quiet silent nx n nh readnow r readnever write statistics tui nw"
                    " nowindows w windows f fullname return-child-result"
                )
            ),
            *(
                value(f"-{name}", f"--{name}")
                for name in names(
                    "p pid c core s symbols e exec se d directory cd tty i interpreter ui data-directory D b baud"
                    " l annotate"
                )
            ),
            info("-version", "--version", "-help", "--help", "-configuration", "--configuration"),
        ),
        # gdb permutes (gdb PROG -ex CMD runs CMD) until --args; read as stopping at PROG so that PROG
        # is found, which is safe only because anything but an information option is unseen (whole)
        permute=False,
        abbreviate=False,
        command=ARGV,
        whole=True,
        language="gdb",
    ),
)

ENVIRONMENT: tuple[Program, ...] = (
    Program(
        names("env"),
        "run a command in a modified environment (-S: a string split into words)",
        W,
        options=(
            flag("-i", "-", "--ignore-environment"),
            flag("-0", "--null"),
            value("-u", "--unset"),
            value("-C", "--chdir"),
            value("-S", "--split-string", runs=Runs.SPLIT),
            flag("-v", "--debug"),
            value("-a", "--argv0"),
            value("--env0-from"),
            attached("--block-signal"),
            attached("--default-signal"),
            attached("--ignore-signal"),
            flag("--list-signal-handling"),
            info("--help"),
            info("--version"),
        ),
        permute=False,
        command=Command(Locate.AFTER_OPTIONS, assignments=True),
    ),
    Program(names("eatmydata"), "run a command without fsync", W, permute=False, command=ARGV),
    Program(
        names("faketime"),
        "run a command with a fake time ([options] TIMESTAMP COMMAND)",
        W,
        options=(
            flag("-m"),
            flag("-f"),
            value("-p"),
            flag("--exclude-monotonic"),
            value("--date-prog", runs=Runs.PROGRAM),
            info("-h", "--help"),
            info("-v", "--version"),
        ),
        permute=False,
        abbreviate=False,
        command=Command(Locate.AFTER_OPTIONS, skip=1),
    ),
    Program(
        names("fakeroot fakeroot-sysv fakeroot-tcp"),
        "run a command with a fake root identity (no command: a shell)",
        W,
        options=(
            value("-l", "--lib", runs=Runs.LOAD),
            value("-f", "--faked", runs=Runs.PROGRAM),
            value("-i"),
            value("-s"),
            flag("-u", "--unknown-is-real"),
            value("-b", "--fd-base"),
            info("-h", "--help"),
            info("-v", "--version"),
        ),
        permute=False,
        command=Command(Locate.AFTER_OPTIONS, default=SHELL_DEFAULT),
    ),
    Program(
        names("proot"),
        "run a command in a user-space chroot (no command: a shell)",
        W,
        options=(
            value("-r", "--rootfs"),
            value("-b", "--bind", "-m", "--mount"),
            value("-q", "--qemu", runs=Runs.SHELL),
            value("-w", "--pwd", "--cwd"),
            flag("--kill-on-exit"),
            value("-v", "--verbose"),
            value("-k", "--kernel-release"),
            flag("-0", "--root-id"),
            value("-i", "--change-id"),
            value("-R"),
            value("-S"),
            value("-p", "--port"),
            flag("-n", "--netcoop"),
            flag("-l", "--link2symlink"),
            info("-V", "--version", "--about"),
            info("-h", "--help", "--usage"),
        ),
        permute=False,
        command=Command(Locate.AFTER_OPTIONS, default=SHELL_DEFAULT),
    ),
    Program(
        names("proxychains proxychains4"),
        "run a command through proxies",
        W,
        options=(flag("-q"), value("-f")),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("torsocks torify"),
        "run a command through Tor",
        W,
        options=(
            value("-u", "--user"),
            value("-p", "--pass"),
            value("-a", "--address"),
            value("-P", "--port"),
            flag("-i", "--isolate"),
            flag("-d", "--debug"),
            flag("-q", "--quiet"),
            flag("--shell"),
            info("-h", "--help"),
            info("--version"),
        ),
        permute=False,
        command=Command(Locate.AFTER_OPTIONS, default=SHELL_DEFAULT, default_with=("--shell",)),
    ),
)

MULTIPLEXERS: tuple[Program, ...] = (
    Program(
        names("xargs"),
        "run a command with arguments read from its input (no command: echo)",
        W,
        options=(
            flag("-0", "--null"),
            value("-a", "--arg-file"),
            value("-d", "--delimiter"),
            value("-E"),
            attached("-e", "--eof"),
            value("-I", placeholder=True),
            attached("-i", "--replace", placeholder=True),
            value("-L"),
            attached("-l", "--max-lines"),
            value("-n", "--max-args"),
            flag("-o", "--open-tty"),
            value("-P", "--max-procs"),
            flag("-p", "--interactive"),
            value("--process-slot-var"),
            flag("-r", "--no-run-if-empty"),
            value("-s", "--max-chars"),
            flag("--show-limits"),
            flag("-t", "--verbose"),
            flag("-x", "--exit"),
            info("--help"),
            info("--version"),
        ),
        permute=False,
        command=Command(Locate.AFTER_OPTIONS, placeholder="{}", appends_input=True),
    ),
    Program(
        names("parallel sem"),
        "GNU parallel: a command (joined, run by a shell) for each input after ':::'; no command: the inputs",
        W,
        options=(
            *(value(f"-{c}") for c in "aCdEIjLnNPS"),
            *(
                value(long)
                for long in names(
                    "--arg-file --colsep --delimiter --delay --timeout --joblog --results --tmpdir --workdir --env"
                    " --sshlogin --basefile --jobs --max-args --max-replace-args --max-lines --retries --halt"
                    " --load --memfree --tagstring --sshloginfile --transferfile --return --nice --tag-string"
                )
            ),
            flag("-k", "--keep-order"),
            flag("-q", "--quote"),
            flag("-v", "--verbose"),
            flag("--tag"),
            flag("--dry-run"),
            flag("--progress"),
            flag("--bar"),
            flag("--eta"),
            flag("--will-cite"),
            flag("-u", "--ungroup", "--group"),
            flag("--line-buffer", "--lb"),
            flag("--pipe", "--pipepart"),
            flag("--shuf"),
            flag("-0", "--null"),
            flag("--xargs", "-m"),
            flag("-X"),
            flag("--no-notice"),
            info("--help", "-h"),
            info("--version", "-V"),
        ),
        permute=False,
        command=Command(
            Locate.JOINED,
            until=(":::", "::::", ":::+", "::::+"),
            inputs_are_commands=True,
            placeholder="{}",
            appends_input=True,
        ),
    ),
    Program(
        names("find"),
        "search files; -exec/-execdir/-ok/-okdir CMD … ; run a command per file",
        W,
        options=(flag("-H"), flag("-L"), flag("-P"), value("-D"), attached("-O")),
        command=Command(
            Locate.PREDICATE, starts=("-exec", "-execdir", "-ok", "-okdir"), ends=(";", "+"), placeholder="{}"
        ),
        check="find",
    ),
    Program(
        names("script"),
        "record a terminal session of a shell (-c: of a command string)",
        W,
        options=(
            flag("-a", "--append"),
            value("-c", "--command", runs=Runs.SHELL),
            value("-E", "--echo"),
            flag("-e", "--return"),
            flag("-f", "--flush"),
            flag("--force"),
            value("-B", "--log-io"),
            value("-I", "--log-in"),
            value("-O", "--log-out"),
            value("-T", "--log-timing"),
            value("-m", "--logging-format"),
            value("-o", "--output-limit"),
            flag("-q", "--quiet"),
            attached("-t", "--timing"),
            *help_version(),
        ),
        command=Command(Locate.OPTIONS, default=SHELL_DEFAULT),
    ),
    Program(
        names("busybox toybox"),
        "multi-call binary: APPLET ARGS runs the applet",
        W,
        options=(stop("--list"), stop("--list-full"), stop("--install"), info("--help")),
        permute=False,
        command=ARGV,
    ),
)

LOADER_NAMES = r"ld(?:-linux(?:-[\w-]+)?|64|-musl-[\w-]+|-[\w.-]+)?\.so(?:\.[\d.]+)?"
"""Dynamic loaders run directly (``/lib64/ld-linux-x86-64.so.2 PROGRAM``), as a regular expression."""

LOADERS: tuple[Program, ...] = (
    Program(
        names("ld.so"),
        "the dynamic loader run directly: [options] PROGRAM ARGS",
        W,
        options=(
            stop("--list"),
            stop("--verify"),
            stop("--list-tunables"),
            stop("--list-diagnostics"),
            info("--help"),
            info("--version"),
            value("--library-path"),
            flag("--inhibit-cache"),
            value("--inhibit-rpath"),
            value("--audit", runs=Runs.LOAD),
            value("--preload", runs=Runs.LOAD),
            value("--argv0"),
            value("--glibc-hwcaps-prepend"),
            value("--glibc-hwcaps-mask"),
        ),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
)

RUNNERS: tuple[Program, ...] = (
    Program(
        names("xvfb-run"),
        "run a command with a virtual X server",
        W,
        options=(
            flag("-a", "--auto-servernum"),
            value("-e", "--error-file"),
            value("-f", "--auth-file"),
            value("-n", "--server-num"),
            value("-l", "--listen-tcp"),
            value("-p", "--xauth-protocol"),
            value("-s", "--server-args"),
            value("-w", "--wait"),
            info("-h", "--help"),
        ),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("dbus-run-session"),
        "run a command with a D-Bus session bus",
        W,
        options=(
            value("--config-file"),
            value("--dbus-daemon", runs=Runs.PROGRAM, risk=(HIGH, "runs a program")),
            info("--help"),
            info("--version"),
        ),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(
        names("runcon"),
        "run a command with another SELinux context (CONTEXT COMMAND, or -c/-u/-r/-t/-l then COMMAND)",
        W,
        options=(
            flag("-c", "--compute"),
            value("-u", "--user"),
            value("-r", "--role"),
            value("-t", "--type"),
            value("-l", "--range"),
            info("--help"),
            info("--version"),
        ),
        permute=False,
        command=Command(Locate.CUSTOM, handler="runcon"),
    ),
    Program(
        names("ifne"),
        "run a command if its input is not empty (moreutils)",
        W,
        options=(flag("-n"),),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("ccache distcc"),
        "compiler cache: runs the compiler command it is given",
        W,
        permute=False,
        command=ARGV,
    ),
    Program(
        names("rlwrap"),
        "run a command with readline editing",
        W,
        options=(
            *(flag(f"-{c}") for c in "AcimnorRtv"),
            *(value(f"-{c}") for c in "abCDefFgHlMpPqsSwz"),
        ),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(
        names("sshpass"),
        "run a command with a password supplied to it",
        W,
        options=(value("-p"), value("-f"), value("-d"), flag("-e"), value("-P"), flag("-v"), info("-h"), info("-V")),
        permute=False,
        command=ARGV,
    ),
    Program(
        names("chpst"),
        "run a command with a changed process state (runit)",
        W,
        options=(
            *(value(f"-{c}") for c in "uUbeamdofcprtn"),
            flag("-P"),
            flag("-0"),
            flag("-1"),
            flag("-2"),
            flag("-v"),
        ),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(
        names("systemd-inhibit"),
        "run a command while holding an inhibitor lock",
        W,
        options=(
            value("--what"),
            value("--who"),
            value("--why"),
            value("--mode"),
            stop("--list"),
            info("-h", "--help"),
            info("--version"),
            flag("--no-pager"),
            flag("--no-legend"),
        ),
        permute=False,
        command=ARGV,
    ),
)

BUILTINS: tuple[Program, ...] = (
    Program(
        names("exec"),
        "replace the shell with a command",
        Family.BUILTIN,
        options=(flag("-c"), flag("-l"), value("-a")),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(
        names("command"),
        "run a command bypassing functions (-v/-V only look it up)",
        Family.BUILTIN,
        options=(flag("-p"), stop("-v"), stop("-V")),
        permute=False,
        abbreviate=False,
        command=ARGV,
    ),
    Program(names("builtin"), "run a shell builtin", Family.BUILTIN, permute=False, abbreviate=False, command=ARGV),
    Program(
        names("eval"),
        "join the arguments and run them as shell code",
        Family.BUILTIN,
        permute=False,
        abbreviate=False,
        command=Command(Locate.JOINED),
    ),
    Program(
        names("coproc"),
        "run a command asynchronously ([NAME] COMMAND; NAME only before { … } or ( … ))",
        Family.BUILTIN,
        permute=False,
        abbreviate=False,
        command=Command(Locate.CUSTOM, handler="coproc"),
    ),
    Program(
        names("trap"),
        "run ACTION (a command string) on signals (-l/-p, '-', '' or a number only reset or list)",
        Family.BUILTIN,
        options=(stop("-l"), stop("-p"), stop("-P")),
        permute=False,
        abbreviate=False,
        command=Command(Locate.CUSTOM, handler="trap"),
    ),
    Program(
        names("mapfile readarray"),
        "read lines into an array; -C CALLBACK is a command string",
        Family.BUILTIN,
        options=(
            value("-d"),
            value("-n"),
            value("-O"),
            value("-s"),
            value("-u"),
            value("-C", runs=Runs.SHELL),
            value("-c"),
            flag("-t"),
        ),
        permute=False,
        abbreviate=False,
        command=Command(Locate.OPTIONS),
    ),
    Program(
        names("compgen"),
        "generate completions: -C COMMAND runs it; -W WORDS expands them again; -F calls a function",
        Family.BUILTIN,
        options=(
            value("-A"),
            value("-G"),
            value("-W", runs=Runs.EXPANDS),
            value("-X"),
            value("-P"),
            value("-S"),
            value("-F", risk=(HIGH, "calls a shell function")),
            value("-C", runs=Runs.SHELL),
            value("-o"),
            value("-V"),
            *(flag(f"-{c}") for c in "abcdefgjksuvI"),
        ),
        permute=False,
        abbreviate=False,
        command=Command(Locate.OPTIONS),
    ),
    Program(
        names("alias"),
        "define aliases: each VALUE of NAME=VALUE is what NAME will run",
        Family.BUILTIN,
        options=(flag("-p"),),
        permute=False,
        abbreviate=False,
        command=Command(Locate.CUSTOM, handler="alias"),
    ),
)

ALL: tuple[Program, ...] = (*TRACING, *ENVIRONMENT, *MULTIPLEXERS, *LOADERS, *RUNNERS, *BUILTINS)
