#!/usr/bin/env python3
"""Generate profiles/seccomp/default.json, our own seccomp profile, from the readable lists below.

    python scripts/gen_seccomp.py           # write profiles/seccomp/default.json
    python scripts/gen_seccomp.py --check   # exit 1 if the committed file differs

The profile is an allowlist in OCI form, resolved for a container with NO capabilities: it starts from
moby's default profile, keeps its unconditional allowlist minus a few entries (see REMOVED_FROM_MOBY),
adds none of the capability-gated rules, and replaces moby's bypassable argument filters with
fail-closed ones. No includes/excludes/archMap keys: containerd drops them.

Decisions
* Default action: SCMP_ACT_ERRNO with EPERM (1), as Docker, runc and gVisor do, and what probes
  expect. Syscalls newer than any the profile names already get ENOSYS from runc (its ENOSYS stub),
  so libc fallbacks keep working; clone3 gets an explicit ENOSYS so glibc falls back to clone.
* Argument filters allow listed values with SCMP_CMP_EQ (one value per rule). A "!=" filter is
  bypassable: the kernel truncates an int argument to 32 bits, the filter compares all 64, so
  socket(0x1_0000_0028, ...) passes "domain != AF_VSOCK" and creates an AF_VSOCK socket. An EQ
  allowlist fails closed on such values. (Several conditions on the same argument in one rule are
  ORed by runc and gVisor, so they cannot express "!= a and != b" either.)
* socket: AF_UNIX, AF_INET, AF_INET6 (loopback only with network none) and AF_NETLINK with protocol
  NETLINK_ROUTE (glibc's getaddrinfo and `ip` read addresses through it; the other netlink families,
  such as audit, xfrm, netfilter and uevent, stay blocked). Every other family is blocked: AF_VSOCK,
  AF_ALG, AF_PACKET, AF_KEY, AF_TIPC, AF_RDS, AF_CAN, AF_XDP, bluetooth, and so on.
* socketpair: AF_UNIX only.
* Architectures: x86_64 (+x32) and aarch64 (+arm), but NOT x86 (i386). On x86, libseccomp turns
  every socket rule into a socketcall(SYS_SOCKET) rule without its argument conditions (the socket
  arguments sit behind a pointer seccomp cannot read), so with x86 listed a 32-bit process could
  create AF_VSOCK/AF_ALG sockets through socketcall; moby's profile has that hole. Without x86, i386
  syscalls (32-bit programs, int 0x80 from 64-bit ones) get libseccomp's bad-architecture action:
  the thread is killed (SIGSYS). gVisor does not run 32-bit programs either, so both runtimes agree.
* clone: allowed only without namespace flags (moby's rule for containers without CAP_SYS_ADMIN):
  (flags & (CLONE_NEWNS|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWCGROUP)) == 0. clone3 passes its flags
  in memory, so it gets ENOSYS. unshare and setns are blocked outright.
* ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, process_madvise: blocked (moby allows the
  first three on kernels >= 4.8). Untrusted code has no reason to inspect other processes, and these
  are a classic kernel attack surface. Consequence: strace/gdb do not work in the sandbox.
* personality: only the values moby allows (0, PER_LINUX32, UNAME26, both, and the 0xffffffff query).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "profiles" / "seccomp" / "default.json"

EPERM = 1
ENOSYS = 38

# No SCMP_ARCH_X86 (i386): see "Architectures" in the module docstring.
ARCHITECTURES = [
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_ARM",
]

# Ordinary unprivileged programs: moby's unconditional allowlist minus REMOVED_FROM_MOBY, plus
# newer calls (futex2, cachestat, fchmodat2, map_shadow_stack, mseal) and the arch-specific calls
# of x86 and arm. A name that does not exist on an architecture is ignored there by the runtimes.
# fmt: off
ALLOWED = [
    "accept", "accept4", "access", "alarm", "arch_prctl", "arm_fadvise64_64", "arm_sync_file_range",
    "bind", "breakpoint", "brk", "cachestat", "cacheflush", "capget", "capset", "chdir", "chmod", "chown",
    "chown32", "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
    "clock_nanosleep", "clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range",
    "creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait",
    "epoll_pwait2", "epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
    "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fchdir", "fchmod", "fchmodat",
    "fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr",
    "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64",
    "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex", "futex_requeue",
    "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "futimesat", "get_robust_list",
    "get_thread_area", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid",
    "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername", "getpgid",
    "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid",
    "getresuid32", "getrlimit", "getrusage", "getsid", "getsockname", "getsockopt", "gettid",
    "gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init",
    "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents",
    "io_pgetevents_time64", "io_setup", "io_submit", "ioctl", "ioprio_get", "ioprio_set", "ipc", "kill",
    "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32",
    "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek",
    "lsetxattr", "lstat", "lstat64", "madvise", "map_shadow_stack", "membarrier", "memfd_create",
    "memfd_secret", "mincore", "mkdir", "mkdirat", "mlock", "mlock2", "mlockall",
    "mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
    "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "mremap", "mseal",
    "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap", "nanosleep",
    "newfstatat", "_newselect", "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal",
    "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
    "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6", "pselect6_time64",
    "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv",
    "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename",
    "renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
    "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max", "sched_get_priority_min",
    "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
    "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl", "semget", "semop", "semtimedop",
    "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto",
    "set_robust_list", "set_thread_area", "set_tid_address", "set_tls", "setfsgid", "setfsgid32",
    "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setitimer", "setpgid",
    "setpriority", "setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32",
    "setreuid", "setreuid32", "setrlimit", "setsid", "setsockopt", "setuid", "setuid32", "setxattr",
    "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4",
    "sigprocmask", "sigreturn", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
    "symlinkat", "sync", "sync_file_range", "sync_file_range2", "syncfs", "sysinfo", "tee", "tgkill",
    "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64",
    "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
    "timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate", "truncate64", "ugetrlimit",
    "umask", "uname", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vfork",
    "vmsplice", "wait4", "waitid", "waitpid", "write", "writev",
]

# fmt: on

# In moby's unconditional list (or allowed there by arch/kernel), not in ours.
REMOVED_FROM_MOBY = {
    "adjtimex": "can set the clock with CAP_SYS_TIME; the read-only use cannot be told apart (struct in memory)",
    "clock_adjtime": "as adjtimex",
    "clock_adjtime64": "as adjtimex",
    "name_to_handle_at": "file handles are only useful to open_by_handle_at, which is blocked",
    "fanotify_mark": "useless without fanotify_init (CAP_SYS_ADMIN)",
    "epoll_ctl_old": "never implemented",
    "epoll_wait_old": "never implemented",
    "modify_ldt": "16-bit segments (Wine, DOSEMU); a recurring kernel bug source",
    "io_uring_setup": "io_uring: bypasses seccomp for the operations it queues; many kernel CVEs",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "ptrace": "no debugging of other processes (moby allows it on kernels >= 4.8)",
    "process_vm_readv": "cross-process memory access (moby allows it on kernels >= 4.8)",
    "process_vm_writev": "cross-process memory access (moby allows it on kernels >= 4.8)",
    "socketcall": "the i386 socket multiplexer: its arguments cannot be filtered (and x86 is not listed)",
    "socketpair": "filtered: AF_UNIX only",
}

# Must never be allowed (tested). Most are capability-gated in moby; the rest never were allowed.
# fmt: off
BLOCKED = [
    # namespaces, mounts, root changes
    "unshare", "setns", "clone3", "mount", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick",
    "open_tree", "move_mount", "mount_setattr", "pivot_root", "chroot",
    # kernel attack surface with no ordinary use in a sandbox
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key", "fanotify_init", "fanotify_mark", "lookup_dcookie",
    "open_by_handle_at", "name_to_handle_at", "modify_ldt", "vm86", "vm86old", "uselib", "ustat",
    "_sysctl", "sysfs", "nfsservctl", "quotactl", "quotactl_fd", "syslog", "vhangup", "iopl", "ioperm",
    "acct", "swapon", "swapoff", "sethostname", "setdomainname",
    # modules, kexec, reboot
    "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module",
    "kexec_load", "kexec_file_load", "reboot",
    # clocks
    "clock_settime", "clock_settime64", "settimeofday", "stime", "clock_adjtime", "clock_adjtime64",
    "adjtimex",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    # socket calls whose arguments cannot be filtered
    "socketcall",
    # NUMA policy (CAP_SYS_NICE-gated in moby)
    "mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node", "move_pages", "migrate_pages",
]

# fmt: on

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
SOCKET_FAMILIES = {"AF_UNIX": AF_UNIX, "AF_INET": AF_INET, "AF_INET6": AF_INET6}

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

PERSONALITY_ALLOWED = {
    "PER_LINUX": 0x0,
    "PER_LINUX32": 0x8,
    "UNAME26": 0x20000,
    "PER_LINUX32|UNAME26": 0x20008,
    "query": 0xFFFFFFFF,
}


S_IFMT = 0o170000
MKNOD_FILE_TYPES = {"unspecified (regular)": 0, "S_IFREG": 0o100000, "S_IFIFO": 0o010000, "S_IFSOCK": 0o140000}


def _eq(index: int, value: int) -> dict[str, Any]:
    return {"index": index, "value": value, "op": "SCMP_CMP_EQ"}


def build_profile() -> dict[str, Any]:
    """The profile as a JSON-ready dict (deterministic)."""
    overlap = set(ALLOWED) & set(BLOCKED)
    if overlap:
        raise SystemExit(f"both allowed and blocked: {sorted(overlap)}")
    if len(set(ALLOWED)) != len(ALLOWED):
        raise SystemExit("ALLOWED lists a name twice")
    syscalls: list[dict[str, Any]] = [{"names": sorted(ALLOWED), "action": "SCMP_ACT_ALLOW"}]
    syscalls.append(
        {
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }
    )
    syscalls.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    for family in SOCKET_FAMILIES.values():
        syscalls.append({"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [_eq(0, family)]})
    syscalls.append(
        {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [_eq(0, AF_NETLINK), _eq(2, NETLINK_ROUTE)]}
    )
    syscalls.append({"names": ["socketpair"], "action": "SCMP_ACT_ALLOW", "args": [_eq(0, AF_UNIX)]})
    # mknod only for what an unprivileged process may make anyway: never a device node. The kernel's
    # CAP_MKNOD check is not enough: gVisor's tmpfs does not make it (seen with runsc 20240729).
    for name, mode_index in (("mknod", 1), ("mknodat", 2)):
        for file_type in MKNOD_FILE_TYPES.values():
            syscalls.append(
                {
                    "names": [name],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": mode_index, "value": S_IFMT, "valueTwo": file_type, "op": "SCMP_CMP_MASKED_EQ"}],
                }
            )
    for persona in PERSONALITY_ALLOWED.values():
        syscalls.append({"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [_eq(0, persona)]})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "architectures": ARCHITECTURES,
        "syscalls": syscalls,
    }


def _wrapped_names(names: list[str], indent: str, width: int = 100) -> str:
    lines: list[str] = []
    line = ""
    for item in (json.dumps(n) for n in names):
        piece = f"{item}, "
        if line and len(indent) + len(line) + len(piece) > width:
            lines.append(indent + line.rstrip())
            line = ""
        line += piece
    lines.append(indent + line.rstrip().rstrip(","))
    return "\n".join(lines)


def render() -> str:
    """The committed text: one rule per line, the long allowlist wrapped (valid JSON, stable)."""
    profile = build_profile()
    rules = []
    for rule in profile["syscalls"]:
        if len(rule["names"]) > 4:
            rest = json.dumps({k: v for k, v in rule.items() if k != "names"})[1:-1]
            rules.append('    {"names": [\n' + _wrapped_names(rule["names"], "      ") + "\n    ], " + rest + "}")
        else:
            rules.append("    " + json.dumps(rule))
    head = {k: v for k, v in profile.items() if k != "syscalls"}
    lines = ["{", *(f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()), '  "syscalls": [']
    text = "\n".join([*lines, ",\n".join(rules), "  ]", "}"]) + "\n"
    if json.loads(text) != profile:  # pragma: no cover - a bug in this renderer
        raise SystemExit("render() does not round-trip")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file differs")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"default: {OUTPUT}")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            sys.stderr.write(f"{args.output} is out of date: run python scripts/gen_seccomp.py\n")
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
