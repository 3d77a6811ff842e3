"""Shells and interpreters: where the code they run comes from.

A shell with ``-c`` runs its first operand as a command string (parsed by the gate); otherwise it runs
a script file, or commands from its input. An interpreter runs code given in an option (``-c``,
``-e``: in a language the gate reads only for awk and sed), loads code (``-r``, ``-M``, ``-f``), runs
a module (``python -m``), a script operand, or code from its input (``-``, nothing, a REPL).
"""

from __future__ import annotations

from orchestrator.gate.programs.build import HIGH, MEDIUM, attached, flag, info, names, value
from orchestrator.gate.programs.model import Command, Family, Locate, Opt, Program, Runs, Takes

INTERPRETER = Family.INTERPRETER

SHELL_NAMES = names("sh bash dash zsh ksh mksh ash fish rbash yash posh ksh93 pdksh lksh oksh")

SHELL = Program(
    SHELL_NAMES,
    "a shell: -c runs its first operand as a command string; else a script file or its input",
    Family.SHELL,
    options=(
        flag("-c"),
        flag("-s"),
        flag("-i"),
        value("-o", "+o"),
        value("-O", "+O"),
        value("--rcfile", "--init-file"),
        flag("--command"),
        Opt(("-",), ends=True),
        info("--version", "--help"),
    ),
    permute=False,
    plus=True,
    abbreviate=False,
    separate_values=True,
    command=Command(Locate.SHELL_OPERAND, flag="-c"),
    language="sh",
    script_operand=True,
)

_PYTHON_FLAGS = "bBdEiIOPqRsSuvx"

INTERPRETERS: tuple[Program, ...] = (
    Program(
        names("python python2 python3 pypy pypy3"),
        "Python",
        INTERPRETER,
        options=(
            value("-c", runs=Runs.CODE, ends=True),
            value("-m", runs=Runs.MODULE, ends=True),
            value("-W"),
            value("-X"),
            value("--check-hash-based-pycs"),
            *(flag(f"-{c}") for c in _PYTHON_FLAGS),
            info("-V", "-VV", "--version", "-h", "-?", "--help", "--help-env", "--help-xoptions", "--help-all"),
        ),
        permute=False,
        abbreviate=False,
        language="python",
        script_operand=True,
        code_modules=frozenset(
            {"timeit", "code", "pdb", "asyncio", "idlelib", "IPython", "ptpython", "bpython", "jupyter", "runpy"}
        ),
        interactive=("-i",),
    ),
    Program(
        names("node nodejs"),
        "Node.js",
        INTERPRETER,
        options=(
            value("-e", "--eval", runs=Runs.CODE),
            value("-p", "--print", runs=Runs.CODE),
            value("-r", "--require", runs=Runs.LOAD),
            *(
                value(long, runs=Runs.LOAD)
                for long in names(
                    "--import --loader --experimental-loader --env-file --env-file-if-exists --run --watch-path"
                    # a snapshot restores and runs an application; the builder config names a script;
                    # an OpenSSL configuration can load engines (shared objects)
                    " --snapshot-blob --build-snapshot-config --openssl-config"
                )
            ),
            Opt(("--test",), runs=Runs.LOAD),
            Opt(("--watch",), runs=Runs.LOAD),
            value("-C", "--conditions"),
            value("--inspect-port", "--debug-port"),
            value("--report-directory", "--report-dir"),
            *(
                value(long)
                for long in names(
                    "--input-type --title --disable-warning --allow-fs-read --allow-fs-write --cpu-prof-dir"
                    " --cpu-prof-interval --cpu-prof-name --diagnostic-dir --disable-proto --dns-result-order"
                    " --experimental-default-type --experimental-policy --experimental-sea-config --heap-prof-dir"
                    " --heap-prof-interval --heap-prof-name --heapsnapshot-near-heap-limit --heapsnapshot-signal"
                    " --icu-data-dir --inspect-publish-uid --max-http-header-size"
                    " --network-family-autoselection-attempt-timeout --policy-integrity --redirect-warnings"
                    " --report-filename --report-signal --secure-heap --secure-heap-min --test-concurrency"
                    " --test-name-pattern --test-reporter --test-reporter-destination --test-shard --test-timeout"
                    " --tls-cipher-list --tls-keylog --trace-event-categories --trace-event-file-pattern"
                    " --trace-require-module --unhandled-rejections --use-largepages --v8-pool-size"
                )
            ),
            *(attached(long) for long in names("--inspect --inspect-brk --inspect-wait")),
            flag("--experimental-test-module-mocks"),
            flag("-i", "--interactive"),
            flag("-c", "--check"),
            info("-v", "--version", "-h", "--help", "--v8-options"),
        ),
        permute=False,
        abbreviate=False,
        language="javascript",
        script_operand=True,
        interactive=("--interactive",),
    ),
    Program(
        names("deno"),
        "Deno: any subcommand runs code",
        INTERPRETER,
        options=(info("-V", "--version", "-h", "--help"),),
        whole=True,
        language="javascript",
    ),
    Program(
        names("bun bunx"),
        "Bun: any subcommand runs code",
        INTERPRETER,
        options=(info("-v", "--version", "-h", "--help", "--revision"),),
        whole=True,
        language="javascript",
    ),
    Program(
        names("perl"),
        "Perl",
        INTERPRETER,
        options=(
            value("-e", "-E", runs=Runs.CODE),
            attached("-m", "-M", runs=Runs.LOAD),
            attached("-d", runs=Runs.LOAD),
            value("-I"),
            *(attached(f"-{c}") for c in "l0ixCDF"),
            *(flag(f"-{c}") for c in "acfnpsStTuUwWX"),
            Opt(("-V",), Takes.ATTACHED, info=True, stop=True),  # -V:NAME prints one configuration value
            info("-v", "--version", "-h", "--help"),
        ),
        permute=False,
        abbreviate=False,
        language="perl",
        script_operand=True,
    ),
    Program(
        names("ruby irb"),
        "Ruby",
        INTERPRETER,
        options=(
            value("-e", runs=Runs.CODE),
            value("-r", runs=Runs.LOAD),
            value("-I"),
            value("-C"),
            value("-E", "--encoding"),
            value("--external-encoding"),
            value("--internal-encoding"),
            *(attached(f"-{c}") for c in "FKTWx0"),
            *(flag(f"-{c}") for c in "acdlnpsSwy"),
            info("-v", "--version", "-h", "--help", "--copyright"),
        ),
        permute=False,
        abbreviate=False,
        language="ruby",
        script_operand=True,
    ),
    Program(
        names("php php-cli"),
        "PHP",
        INTERPRETER,
        options=(
            value("-r", "--run", runs=Runs.CODE),
            value("-B", "--process-begin", runs=Runs.CODE),
            value("-R", "--process-code", runs=Runs.CODE),
            value("-E", "--process-end", runs=Runs.CODE),
            value("-f", "--file", runs=Runs.LOAD),
            value("-F", "--process-file", runs=Runs.LOAD),
            value("-d", "--define", runs=Runs.LOAD),
            value("-c", "--php-ini", runs=Runs.LOAD),
            value("-z", "--zend-extension", runs=Runs.LOAD),
            value("-S", runs=Runs.LOAD),
            value("-t", "--docroot"),
            *(Opt((f"--r{c}",), Takes.VALUE, info=True) for c in "fcezi"),
            flag("-a", "--interactive"),
            *(flag(f"-{c}") for c in "CeHlnqsw"),
            info("-v", "--version", "-h", "--help", "-i", "--info", "-m", "--modules", "--ini"),
        ),
        permute=False,
        abbreviate=False,
        language="php",
        script_operand=True,
        interactive=("--interactive",),
    ),
    Program(
        names("lua luajit"),
        "Lua",
        INTERPRETER,
        options=(
            value("-e", runs=Runs.CODE),
            value("-l", runs=Runs.LOAD),
            flag("-i"),
            flag("-E"),
            flag("-W"),
            info("-v"),
        ),
        permute=False,
        abbreviate=False,
        language="lua",
        script_operand=True,
        interactive=("-i",),
    ),
    Program(
        names("Rscript"),
        "R, as a script runner",
        INTERPRETER,
        options=(value("-e", runs=Runs.CODE), info("--version", "--help")),
        permute=False,
        abbreviate=False,
        language="r",
        script_operand=True,
    ),
    Program(
        names("R"),
        "R",
        INTERPRETER,
        options=(
            value("-e", runs=Runs.CODE),
            value("-f", "--file", runs=Runs.LOAD),
            flag("-q", "--quiet", "--silent", "-s"),
            flag("--vanilla"),
            flag("--no-save"),
            flag("--slave", "--no-echo"),
            Opt(("--args",), ends=True),
            info("--version", "-h", "--help"),
        ),
        permute=False,
        abbreviate=False,
        language="r",
        script_operand=True,
    ),
    Program(
        names("julia"),
        "Julia",
        INTERPRETER,
        options=(
            value("-e", "--eval", runs=Runs.CODE),
            value("-E", "--print", runs=Runs.CODE),
            value("-L", "--load", runs=Runs.LOAD),
            value("-J", "--sysimage", runs=Runs.LOAD),
            value("-C", "--cpu-target"),
            value("-t", "--threads"),
            value("-p", "--procs"),
            attached("--project"),
            flag("-i"),
            flag("-q", "--quiet"),
            info("-v", "--version", "-h", "--help", "--help-hidden"),
        ),
        permute=False,
        abbreviate=False,
        language="julia",
        script_operand=True,
        interactive=("-i",),
    ),
    Program(
        names("osascript"),
        "AppleScript/JavaScript for Automation",
        INTERPRETER,
        options=(value("-e", runs=Runs.CODE), value("-l"), value("-s"), flag("-i")),
        permute=False,
        abbreviate=False,
        language="applescript",
        script_operand=True,
    ),
    Program(
        names("tclsh wish expect"),
        "Tcl",
        INTERPRETER,
        options=(value("-c", runs=Runs.CODE), value("-f", runs=Runs.LOAD), flag("-i"), flag("-d")),
        permute=False,
        abbreviate=False,
        language="tcl",
        script_operand=True,
    ),
)

_AWK_LOAD = Runs.LOAD

AWK = Program(
    names("awk gawk mawk nawk original-awk busybox-awk"),
    "awk: the first operand is the program unless -f/-e/-E gave one; system(), pipes and print > run or write",
    INTERPRETER,
    options=(
        value("-f", "--file", runs=_AWK_LOAD),
        value("-E", "--exec", runs=_AWK_LOAD, ends=True),
        value("-i", "--include", runs=_AWK_LOAD),
        value("-l", "--load", runs=_AWK_LOAD),
        value("-e", "--source", runs=Runs.CODE),
        value("-v", "--assign"),
        value("-F", "--field-separator"),
        value("-W"),
        flag("-S", "--sandbox"),
        *(
            attached(f"-{c}", f"--{long}")
            for c, long in zip("dDLopT", names("dump-variables debug lint pretty-print profile lint-old"), strict=True)
        ),
        *(
            flag(f"-{c}", f"--{long}")
            for c, long in zip(
                "bcgMnNOPrs",
                names(
                    "characters-as-bytes traditional gen-pot bignum non-decimal-data use-lc-numeric optimize"
                    " posix re-interval no-optimize"
                ),
                strict=True,
            )
        ),
        info("-h", "--help", "-V", "--version", "-C", "--copyright"),
    ),
    permute=False,
    language="awk",
    code_operand=True,
    check="awk",
)

SED = Program(
    names("sed gsed"),
    "sed: the first operand is the script unless -e/-f gave one; e runs commands, w writes files",
    Family.TOOL,
    options=(
        value("-e", "--expression", runs=Runs.CODE),
        value(
            "-f",
            "--file",
            runs=Runs.LOAD,
            risk=(HIGH, "runs a script file (its commands can run programs and write files)"),
        ),
        attached("-i", "--in-place", risk=(MEDIUM, "edits files in place")),
        flag("-n", "--quiet", "--silent"),
        value("-l", "--line-length"),
        flag("-E", "-r", "--regexp-extended"),
        flag("-s", "--separate"),
        flag("-z", "--null-data", "--zero-terminated"),
        flag("-u", "--unbuffered"),
        flag("-b", "--binary"),
        flag("--sandbox"),
        flag("--posix"),
        flag("--debug"),
        flag("--follow-symlinks"),
        info("--help"),
        info("--version"),
    ),
    language="sed",
    code_operand=True,
    check="sed",
)

ALL: tuple[Program, ...] = (SHELL, *INTERPRETERS, AWK, SED)

PATTERNS: tuple[tuple[str, Program], ...] = (
    (r"(?:python|pypy)[\d.]*", INTERPRETERS[0]),
    (r"perl[\d.]*", INTERPRETERS[4]),
    (r"ruby[\d.]*", INTERPRETERS[5]),
    (r"php[\d.]*(?:-cli)?", INTERPRETERS[6]),
    (r"lua[\d.]*", INTERPRETERS[7]),
    (r"(?:tclsh|wish)[\d.]*", INTERPRETERS[12]),
)
"""Versioned names (``python3.11``, ``perl5.36``) as regular expressions over the whole name."""
