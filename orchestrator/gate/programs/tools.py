"""Programs that run nothing of their operands: their options (for patterns such as ``rm -rf`` and for
the options that run programs or write files) and what the risk analyzer says of them.

``PLAIN`` lists programs known to treat every operand as data (``grep sudo notes.txt`` runs no
sudo). A program in no table is opaque: the gate cannot tell what it does with its operands.
"""

from __future__ import annotations

from orchestrator.gate.programs.build import (
    CRITICAL,
    HIGH,
    MEDIUM,
    RUNS,
    WRITES,
    attached,
    flag,
    info,
    names,
    short_flag_long_optional,
    value,
)
from orchestrator.gate.programs.model import Command, Family, Locate, Opt, Program, Runs, Takes

T = Family.TOOL
_VERSIONS = (info("--help"), info("--version"))

_CHMOD_OPTIONS = (
    flag("-R", "--recursive"),
    flag("-v", "--verbose"),
    flag("-c", "--changes"),
    flag("-f", "--silent", "--quiet"),
    value("--reference"),
    flag("--preserve-root"),
    flag("--no-preserve-root"),
    *_VERSIONS,
)

FILES: tuple[Program, ...] = (
    Program(
        names("rm"),
        "remove files",
        T,
        options=(
            flag("-r", "-R", "--recursive"),
            flag("-f", "--force"),
            # --interactive=never deletes without asking, as -f does
            *short_flag_long_optional("-i", "--interactive", value_means=(("never", ("--force",)),)),
            flag("-I"),
            flag("-d", "--dir"),
            flag("-v", "--verbose"),
            flag("--one-file-system"),
            flag("--no-preserve-root"),
            attached("--preserve-root"),
            *_VERSIONS,
        ),
        check="rm",
    ),
    Program(names("chmod"), "change file modes", T, options=_CHMOD_OPTIONS, check="chmod", first_operand="mode"),
    Program(
        names("chown"),
        "change file owners",
        T,
        options=(*_CHMOD_OPTIONS, flag("-h", "--no-dereference"), flag("--dereference"), value("--from")),
        check="chown",
    ),
    Program(
        names("chgrp"),
        "change file groups",
        T,
        options=(*_CHMOD_OPTIONS, flag("-h", "--no-dereference"), flag("--dereference")),
        check="chown",
    ),
    Program(
        names("cp"),
        "copy files",
        T,
        options=(
            flag("-r", "-R", "--recursive"),
            flag("-f", "--force"),
            flag("-a", "--archive"),
            flag("-i", "--interactive"),
            flag("-n", "--no-clobber"),
            *short_flag_long_optional("-u", "--update"),
            flag("-v", "--verbose"),
            flag("-l", "--link"),
            flag("-s", "--symbolic-link"),
            *short_flag_long_optional("-b", "--backup"),
            flag("-L", "--dereference"),
            flag("-P", "--no-dereference"),
            flag("-x", "--one-file-system"),
            value("-t", "--target-directory"),
            flag("-T", "--no-target-directory"),
            value("-S", "--suffix"),
            *(
                flag(long)
                for long in names(
                    "--remove-destination --parents --attributes-only --strip-trailing-slashes --copy-contents"
                )
            ),
            attached("--preserve"),
            attached("--reflink"),
            value("--no-preserve"),
            value("--sparse"),
            *short_flag_long_optional("-Z", "--context"),
            *_VERSIONS,
        ),
        check="cp",
    ),
    Program(
        names("mv"),
        "move files",
        T,
        options=(
            flag("-f", "--force"),
            flag("-i", "--interactive"),
            flag("-n", "--no-clobber"),
            *short_flag_long_optional("-u", "--update"),
            flag("-v", "--verbose"),
            *short_flag_long_optional("-b", "--backup"),
            value("-t", "--target-directory"),
            flag("-T", "--no-target-directory"),
            value("-S", "--suffix"),
            flag("--strip-trailing-slashes"),
            flag("--no-copy"),
            flag("--exchange"),
            *_VERSIONS,
        ),
        check="mv",
    ),
    Program(names("dd"), "copy and convert data (of=FILE writes)", T, check="dd"),
    Program(
        names("tee"),
        "copy its input to files",
        T,
        options=(
            flag("-a", "--append"),
            flag("-i", "--ignore-interrupts"),
            flag("-p"),
            attached("--output-error"),
            *_VERSIONS,
        ),
        check="tee",
    ),
    Program(
        names("install"),
        "copy files and set attributes",
        T,
        options=(
            value("--strip-program", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("-m", "--mode"),
            value("-o", "--owner"),
            value("-g", "--group"),
            value("-t", "--target-directory"),
            value("-S", "--suffix"),
            flag("-s", "--strip"),
            flag("-d", "--directory"),
            flag("-D"),
            *short_flag_long_optional("-b", "--backup"),
            *short_flag_long_optional("-Z", "--context"),
        ),
    ),
    Program(
        names("split"),
        "split a file into pieces (--filter runs a command per piece)",
        T,
        options=(
            value("--filter", runs=Runs.SHELL, risk=(HIGH, "runs a command for every piece")),
            value("-a", "--suffix-length"),
            value("-b", "--bytes"),
            value("-C", "--line-bytes"),
            value("-l", "--lines"),
            value("-n", "--number"),
            value("-t", "--separator"),
            *short_flag_long_optional("-d", "--numeric-suffixes"),
            *short_flag_long_optional("-x", "--hex-suffixes"),
            value("--additional-suffix"),
        ),
    ),
)

TEXT: tuple[Program, ...] = (
    Program(
        names("sort"),
        "sort lines",
        T,
        options=(
            value("-o", "--output", risk=(HIGH, WRITES)),
            value("--compress-program", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            *short_flag_long_optional("-c", "--check"),
            flag("-C"),
            value("-T", "--temporary-directory"),
            value("-k", "--key"),
            value("-t", "--field-separator"),
            value("-S", "--buffer-size"),
            flag("-m", "--merge"),
            flag("-u", "--unique"),
            flag("-r", "--reverse"),
            flag("-n", "--numeric-sort"),
            value("--files0-from"),
            value("--random-source"),
            value("--parallel"),
            value("--sort"),
            value("--batch-size"),
            flag("--debug"),
        ),
    ),
    Program(
        names("uniq"),
        "report or omit repeated lines (a second operand is the OUTPUT file)",
        T,
        options=(
            value("-f", "--skip-fields"),
            value("-s", "--skip-chars"),
            value("-w", "--check-chars"),
            flag("-c", "--count"),
            flag("-d", "--repeated"),
            *short_flag_long_optional("-D", "--all-repeated"),
            flag("-u", "--unique"),
            flag("-i", "--ignore-case"),
            flag("-z", "--zero-terminated"),
            attached("--group"),
        ),
        check="uniq",
    ),
    Program(
        names("date"),
        "print or set the date",
        T,
        options=(
            value("-s", "--set", risk=(MEDIUM, "sets the system clock")),
            value("-d", "--date"),
            value("-f", "--file"),
            value("-r", "--reference"),
            flag("-u", "--utc", "--universal"),
            flag("-R", "--rfc-email"),
            attached("-I", "--iso-8601"),
            value("--rfc-3339"),
            flag("--debug"),
            flag("--resolution"),
        ),
    ),
    Program(
        names("file"),
        "determine file types",
        T,
        options=(
            flag("-C", "--compile", risk=(MEDIUM, "writes a compiled magic file")),
            value("-m", "--magic-file"),
            value("-f", "--files-from"),
            value("-F", "--separator"),
            value("-e", "--exclude"),
            value("-P", "--parameter"),
            value("--exclude-quiet"),
            flag("-b", "--brief"),
            flag("-i", "--mime"),
            flag("-z", "--uncompress"),
            flag("-Z", "--uncompress-noreport"),
            flag("-L", "--dereference"),
            flag("-h", "--no-dereference"),
        ),
    ),
    Program(
        names("sdiff"),
        "merge two files side by side",
        T,
        options=(
            value("-o", "--output", risk=(HIGH, WRITES)),
            value("--diff-program", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("-I", "--ignore-matching-lines"),
            value("-w", "--width"),
            value("--tabsize"),
        ),
    ),
    Program(
        names("diff3"),
        "compare three files",
        T,
        options=(
            value("--diff-program", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("-L", "--label"),
            *(flag(f"-{c}") for c in "aeExX3iAmT"),
            flag("--text"),
            flag("--merge"),
            flag("--strip-trailing-cr"),
        ),
    ),
    Program(
        names("rg"),
        "ripgrep (--pre runs a program on every file)",
        T,
        options=(
            value("--pre", runs=Runs.PROGRAM, risk=(HIGH, "runs a program on every file")),
            value("--hostname-bin", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("--pre-glob"),
            *(value(f"-{c}") for c in "efgtTmABCjMrEd"),
        ),
        abbreviate=False,
    ),
    Program(
        names("zip"),
        "package files (-TT/--unzip-command runs a command to test the archive)",
        T,
        options=(
            # zip takes -TT's value glued too (-TTcmd, -TT=cmd)
            Opt(("-TT",), Takes.VALUE, runs=Runs.SHELL, risk=(HIGH, RUNS), means=("-TT/--unzip-command",), glued=True),
            Opt(("--unzip-command",), Takes.VALUE, runs=Runs.SHELL, risk=(HIGH, RUNS), means=("-TT/--unzip-command",)),
            value("-b"),
            value("-n"),
            value("-t"),
            value("-tt"),
        ),
        check="zip",
    ),
    Program(
        names("tar"),
        "archives (old-style first word bundles options: tar xIf PROG a.tar)",
        T,
        options=(
            value("--to-command", runs=Runs.SHELL, risk=(HIGH, RUNS)),
            flag("-O", "--to-stdout"),
            value("-I", "--use-compress-program", runs=Runs.SHELL, risk=(HIGH, RUNS)),
            attached("--checkpoint"),
            value("--checkpoint-action", runs=Runs.ACTION, risk=(HIGH, "can run a command")),
            value("-F", "--info-script", "--new-volume-script", runs=Runs.SHELL, risk=(HIGH, RUNS)),
            value("--rsh-command", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("--rmt-command", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),
            value("-f", "--file"),
            value("-C", "--directory"),
            flag("-x", "--extract", "--get"),
            flag("-c", "--create"),
            flag("-t", "--list"),
            flag("-P", "--absolute-names"),
            *(value(*s) for s in (("-T", "--files-from"), ("-X", "--exclude-from"), ("-b", "--blocking-factor"))),
            *(value(*s) for s in (("-g", "--listed-incremental"), ("-H", "--format"), ("-K", "--starting-file"))),
            *(value(*s) for s in (("-L", "--tape-length"), ("-N", "--newer", "--after-date"), ("-V", "--label"))),
            *(flag(f"-{c}") for c in "vzjJaZrudAkpWhMGBi"),
            # spelled out: as a prefix --sparse would read as --sparse-version, which takes a value
            flag("-S", "--sparse"),
            value("--transform", "--xform"),
            *(
                value(long)
                for long in names(
                    "--exclude --exclude-ignore --exclude-ignore-recursive --exclude-tag --exclude-tag-all"
                    " --exclude-tag-under --add-file --group --group-map --owner --owner-map --mode --mtime --sort"
                    " --hole-detection --level --sparse-version --xattrs-exclude --xattrs-include --volno-file"
                    " --record-size --pax-option --newer-mtime --suffix --strip-components --index-file"
                    " --no-quote-chars --quote-chars --quoting-style --warning"
                )
            ),
            *(attached(long) for long in names("--occurrence --one-top-level --atime-preserve --backup --totals")),
        ),
        bundled_first=True,
    ),
    Program(
        names("man"),
        "show manual pages (-P/--pager runs a pager, -H/--html a browser; -C reads a config)",
        T,
        options=(
            value("-P", "--pager", runs=Runs.SHELL, risk=(HIGH, RUNS)),
            attached("-H", "--html", runs=Runs.SHELL, risk=(HIGH, RUNS)),
            value("-C", "--config-file", runs=Runs.LOAD, risk=(HIGH, "reads a configuration that can run programs")),
            value("-M", "--manpath"),
            value("-L", "--locale"),
            value("-R", "--recode"),
            value("-m", "--systems"),
            value("-S", "-s", "--sections"),
            value("-e", "--extension"),
            value("-r", "--prompt"),
            value("-E", "--encoding"),
            value("-p", "--preprocessor"),
            flag("-t", "--troff"),  # not a prefix of --troff-device
            attached("-T", "--troff-device"),
            attached("-X", "--gxditview"),
            attached("--warnings"),
        ),
    ),
)

NETWORK_NAMES = names("curl wget nc ncat netcat ssh scp sftp telnet ftp socat aria2c xh")
_NETWORK = ((MEDIUM, "uses the network"),)
_SSH_COMMAND = Command(Locate.CUSTOM, handler="ssh_options")

NETWORK: tuple[Program, ...] = (
    Program(names("curl nc ncat netcat telnet ftp socat aria2c xh"), "network client", T, findings=_NETWORK),
    Program(
        names("wget"),
        "network client",
        T,
        options=(value("--use-askpass", runs=Runs.PROGRAM, risk=(HIGH, RUNS)),),
        findings=_NETWORK,
    ),
    Program(
        names("ssh"),
        "remote shell (the remote command runs elsewhere; -o ProxyCommand=… runs here)",
        T,
        options=(
            *(value(f"-{c}") for c in "BbcDEeFIiJLlmOoPpQRSWw"),
            *(flag(f"-{c}") for c in "1246AaCfGgKkMNnqsTtVvXxYy"),
        ),
        permute=False,
        options_again=1,
        findings=_NETWORK,
        command=_SSH_COMMAND,
        check="ssh",
    ),
    Program(
        names("scp"),
        "remote copy",
        T,
        options=(
            value("-S", runs=Runs.PROGRAM),
            *(value(f"-{c}") for c in "cDFiJloPX"),
            *(flag(f"-{c}") for c in "346ABCOpqRrsTv"),
        ),
        permute=False,  # OpenSSH's own BSD getopt: options end at the first operand
        findings=_NETWORK,
        command=_SSH_COMMAND,
        check="ssh",
    ),
    Program(
        names("sftp"),
        "remote file transfer",
        T,
        options=(
            value("-S", runs=Runs.PROGRAM),
            value("-D", runs=Runs.PROGRAM),
            *(value(f"-{c}") for c in "BbcFiJloPRsX"),
            *(flag(f"-{c}") for c in "46AaCfNpqrv"),
        ),
        permute=False,  # OpenSSH's own BSD getopt: options end at the first operand
        findings=_NETWORK,
        command=_SSH_COMMAND,
        check="ssh",
    ),
    Program(
        names("rsync"),
        "file sync (remote with HOST: or rsync://)",
        T,
        options=(value("-e", "--rsh", runs=Runs.SHELL, risk=(HIGH, RUNS)), value("--rsync-path", risk=(HIGH, RUNS))),
        check="rsync",
    ),
)

SIGNALS = names(
    "HUP INT QUIT ILL TRAP ABRT IOT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CLD CONT STOP"
    " TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO POLL PWR SYS RTMIN RTMAX"
)
"""Signal names kill takes as an option (``kill -KILL``, ``kill -SIGTERM``)."""
_PARTITION = ((HIGH, "rewrites a partition table"),)
_POWER = ((HIGH, "stops or restarts the machine"),)

SYSTEM: tuple[Program, ...] = (
    Program(names("mke2fs mkswap"), "make a filesystem", T, findings=((CRITICAL, "formats a filesystem"),)),
    Program(names("shred"), "overwrite files", T, findings=((HIGH, "destroys file contents"),)),
    Program(names("wipefs"), "wipe signatures", T, findings=((HIGH, "wipes filesystem signatures"),)),
    Program(names("blkdiscard"), "discard device sectors", T, findings=((HIGH, "discards a whole device"),)),
    Program(names("fdisk sfdisk cfdisk gdisk sgdisk parted"), "partition tables", T, findings=_PARTITION),
    Program(names("shutdown reboot halt poweroff"), "power the machine", T, findings=_POWER),
    Program(names("systemctl"), "control systemd", T, check="systemctl"),
    Program(names("init telinit"), "change the runlevel", T, check="init"),
    Program(names("killall5"), "signal every process", T, findings=((HIGH, "signals every process"),)),
    Program(
        names("kill"),
        "signal processes",
        T,
        options=(
            value("-s", "--signal"),
            value("-n"),
            attached("-l", "--list"),
            flag("-L", "--table"),
            value("-q", "--queue"),
            value("--timeout"),
            *(flag(f"-{name}", f"-SIG{name}", f"-{name.lower()}", f"-sig{name.lower()}") for name in SIGNALS),
        ),
        numeric=True,
        check="kill",
    ),
)

MKFS = Program(names("mkfs"), "make a filesystem (mkfs.TYPE)", T, findings=((CRITICAL, "formats a filesystem"),))

SHELL_BUILTINS: tuple[Program, ...] = (
    Program(names("source ."), "run a script file in the current shell", Family.BUILTIN, check="source"),
    Program(
        names("enable"),
        "enable builtins (-f loads a shared object)",
        Family.BUILTIN,
        options=(
            value("-f", runs=Runs.BINDS, risk=(HIGH, "loads a shared object as a builtin")),
            *(flag(f"-{c}") for c in "adnps"),
        ),
        permute=False,
        abbreviate=False,
    ),
    Program(
        names("bind"),
        "readline bindings (-x binds a key to a shell command)",
        Family.BUILTIN,
        options=(
            value("-x", risk=(HIGH, "binds a key to a shell command")),
            *(value(f"-{c}") for c in "mqufr"),
            *(flag(f"-{c}") for c in "lpPsSvVX"),
        ),
        permute=False,
        abbreviate=False,
    ),
    Program(
        names("complete"),
        "completion specs (-C/-F/-W define what runs at completion)",
        Family.BUILTIN,
        options=(
            Opt(
                ("-C", "-F", "-W"), Takes.VALUE, risk=(HIGH, "defines a command run at completion"), means=("-C/-F/-W",)
            ),
            *(value(f"-{c}") for c in "AGXPSo"),
            *(flag(f"-{c}") for c in "abcdefgjksuvprDEI"),
        ),
        permute=False,
        abbreviate=False,
    ),
    Program(
        names("hash"),
        "remember program locations (-p binds a name to a program)",
        Family.BUILTIN,
        options=(
            value("-p", runs=Runs.BINDS, risk=(HIGH, "binds a command name to another program")),
            *(flag(f"-{c}") for c in "rdlt"),
        ),
        permute=False,
        abbreviate=False,
    ),
    Program(
        names("fc"),
        "re-run history commands after an editor (-e EDITOR) has them; -l only lists",
        Family.BUILTIN,
        options=(info("-l"), value("-e", runs=Runs.SHELL), flag("-s"), flag("-n"), flag("-r")),
        permute=False,
        abbreviate=False,
        whole=True,
        language="history",
        check="fc",
    ),
)

PLAIN = Program(
    names(
        "cat tac head tail wc nl od hexdump xxd strings base64 base32 md5sum sha1sum sha224sum sha256sum"
        " sha384sum sha512sum b2sum cksum sum ls dir vdir stat which whereis whatis apropos echo printf yes"
        " true false pwd basename dirname realpath readlink uname hostname id whoami groups users who"
        " cal uptime printenv locale tty test [ expr seq factor numfmt tr cut paste join comm csplit fold"
        " fmt pr column expand unexpand diff cmp grep egrep fgrep jq mkdir rmdir touch ln truncate sync du df"
        " free ps pgrep pkill pidof nproc lscpu lsblk findmnt getent iconv sleep tree gzip gunzip zcat bzip2"
        " bunzip2 xz unxz zstd unzstd lz4 unzip type read wait"
    ),
    "reads its operands as data: runs none of them",
    T,
)

ALL: tuple[Program, ...] = (*FILES, *TEXT, *NETWORK, *SYSTEM, MKFS, *SHELL_BUILTINS, PLAIN)
PATTERNS: tuple[tuple[str, Program], ...] = ((r"mkfs\..*|mkfs.+", MKFS),)
