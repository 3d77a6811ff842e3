"""The doctor's probe: what a sandbox reads about itself from inside, and whether that is its profile.

The rlimits come from ``/proc/self/limits`` (bytes and counts, as the kernel keeps them): a shell's
``ulimit -f`` counts in blocks whose size depends on the shell (bash: 1024 bytes, dash: 512), and printed
bare it read as a number of bytes. Every size is shown with its unit, as the rest of the CLI shows sizes.
"""

from __future__ import annotations

import re

from orchestrator.profiles import ResolvedProfile, format_size

PROBE = (
    "grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status; "
    "for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes "
    '/sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max; do [ -r $f ] && echo "$f=$(cat $f)"; done; '
    "grep -E '^Max (open files|file size) ' /proc/self/limits; "
    "id -u; touch /probe-root 2>/dev/null && echo root-writable || echo root-read-only"
)
_STATUS = re.compile(r"^(Seccomp|NoNewPrivs|CapEff|CapBnd):\s*(\S+)")
# "Max open files  1024  1024  files": the soft limit (the one a write or an open runs into)
_LIMIT = re.compile(r"^Max (open files|file size)\s+(\S+)\s+\S+")


def parse_probe(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    rest: list[str] = []
    for line in text.splitlines():
        if m := _STATUS.match(line):
            found[m.group(1)] = m.group(2)
        elif m := _LIMIT.match(line):
            found["nofile" if m.group(1) == "open files" else "fsize"] = m.group(2)
        elif "=" in line and line.startswith("/sys/fs/cgroup/"):
            path, _, value = line.partition("=")
            found["memory" if "memory" in path else "pids"] = value
        elif line:
            rest.append(line)
    if len(rest) >= 2:
        found["uid"], found["root"] = rest[-2:]
    return found


def _size(value: str | None) -> str:
    return format_size(int(value)) if value is not None and value.isdigit() else value or "?"


def _differs(seen: str | None, want: int) -> bool:
    """A limit read and not the profile's (unreadable counts: what is not seen is not in force)."""
    return seen is None or not seen.isdigit() or int(seen) != want


def probe_verdict(profile: ResolvedProfile, seen: dict[str, str], *, node_pids: bool = False) -> tuple[bool, str]:
    """Whether what the probe saw is the profile, and what it saw. Fail closed: a limit not read, or read as
    ``max`` (none), is not in force. Under runc the memory and pids limits are compared with the profile's;
    under gVisor they sit on the host cgroup (not visible inside: shown as host-enforced); ``node_pids``: the
    pids limit is the node's (a pod has no field of its own), shown, not compared."""
    problems = []
    gvisor = profile.runtime == "runsc"
    if seen.get("Seccomp") != "2":  # gVisor reports it too when registered with --oci-seccomp
        problems.append(f"seccomp mode {seen.get('Seccomp')!r} (want 2: filter)")
    caps = seen.get("CapEff")
    if caps is None or not re.fullmatch(r"[0-9a-fA-F]+", caps) or caps.strip("0"):
        problems.append(f"effective capabilities {caps or '?'} (want none)")  # unread: not known to be none
    if not gvisor and seen.get("NoNewPrivs") != "1":
        problems.append("no_new_privs is not set")
    memory, pids = seen.get("memory"), seen.get("pids")
    shown_memory = _size(memory)
    if gvisor:
        # gVisor shows its own cgroup tree inside; the limits sit on the host cgroup around the sandbox
        memory = pids = shown_memory = "host-enforced"
    else:
        if _differs(memory, profile.memory_bytes):  # "max" (none), another limit, or unread: not in force
            problems.append(f"memory limit {shown_memory} (want {format_size(profile.memory_bytes)})")
        if node_pids:  # the node's, whatever it is: shown, not compared
            pids = f"{pids or '?'} (the node's pod limit)"
        elif _differs(pids, profile.pids_limit):
            problems.append(f"pids limit {pids or '?'} (want {profile.pids_limit})")
    if _differs(seen.get("nofile"), profile.nofile):
        problems.append(f"open files limit {seen.get('nofile', '?')} (want {profile.nofile})")
    if _differs(seen.get("fsize"), profile.fsize_bytes):
        problems.append(f"file size limit {_size(seen.get('fsize'))} (want {format_size(profile.fsize_bytes)})")
    if seen.get("uid") == "0":
        problems.append("runs as root")
    if seen.get("root") != "root-read-only" and profile.read_only_root:
        problems.append("root filesystem is writable")
    detail = (
        f"seccomp={seen.get('Seccomp', '?')} no_new_privs={seen.get('NoNewPrivs', 'n/a')} "
        f"caps={seen.get('CapEff', '?')} memory={shown_memory} pids={pids or '?'} "
        f"nofile={seen.get('nofile', '?')} fsize={_size(seen.get('fsize'))} uid={seen.get('uid', '?')} "
        f"{seen.get('root', '?')}"
    )
    return (not problems, detail if not problems else "; ".join(problems) + f" — saw {detail}")
