"""Our seccomp profile (profiles/seccomp/default.json): what it blocks, what it allows, how it is checked.

No container is started: the JSON is parsed and evaluated with libseccomp/runc semantics
(orchestrator.profiles.seccomp.syscall_action). A real-engine probe suite comes separately.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles import blocked_syscalls, load_seccomp, parse_seccomp, syscall_action
from orchestrator.profiles.paths import builtin_dir
from orchestrator.profiles.seccomp import unconditionally_allowed, validate_seccomp
from tests.support.paths import ROOT

DEFAULT_JSON = ROOT / "profiles" / "seccomp" / "default.json"

EPERM, ENOSYS = 1, 38
AF_UNIX, AF_INET, AF_INET6, AF_PACKET, AF_NETLINK, AF_ALG, AF_VSOCK = 1, 2, 10, 17, 16, 38, 40
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW = 1, 2, 3
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x20000, 0x10000000, 0x40000000, 0x20000000
CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x02000000, 0x04000000, 0x08000000
SIGCHLD = 17
# glibc's pthread_create and fork flags
THREAD_FLAGS = 0x3D0F00  # VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
FORK_FLAGS = 0x01200000 | SIGCHLD  # CHILD_SETTID|CHILD_CLEARTID|SIGCHLD

MUST_BLOCK = [
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "keyctl", "add_key",
    "request_key", "bpf", "perf_event_open", "unshare", "setns", "mount", "umount2", "fsopen", "fsconfig",
    "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr", "pivot_root", "chroot", "init_module",
    "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "clock_settime",
    "clock_settime64", "settimeofday", "clock_adjtime", "adjtimex", "open_by_handle_at", "name_to_handle_at",
    "ptrace", "acct", "swapon", "swapoff", "quotactl", "lookup_dcookie", "vhangup", "iopl", "ioperm",
    "nfsservctl", "sysfs", "syslog", "uselib", "ustat", "_sysctl", "create_module", "get_kernel_syms",
    "query_module", "vm86", "vm86old", "kcmp", "process_vm_readv", "process_vm_writev", "fanotify_init",
    "mbind", "set_mempolicy", "move_pages", "clone3", "personality", "clone", "socket",
]  # fmt: skip

ORDINARY = [
    "read", "write", "openat", "open", "close", "execve", "futex", "mmap", "munmap", "mprotect", "brk",
    "exit_group", "exit", "statx", "newfstatat", "fstat", "getdents64", "pipe2", "wait4", "waitid",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "getpid", "gettid", "set_tid_address",
    "set_robust_list", "rseq", "prlimit64", "getrandom", "clock_gettime", "clock_nanosleep", "nanosleep",
    "lseek", "pread64", "dup3", "fcntl", "ioctl", "poll", "ppoll", "epoll_wait", "epoll_ctl",
    "epoll_create1", "eventfd2", "readlinkat", "unlinkat", "mkdirat", "renameat2", "fchmodat", "faccessat2",
    "utimensat", "getcwd", "chdir", "uname", "sched_yield", "sched_getaffinity", "madvise", "kill", "tgkill",
    "vfork", "fork", "connect", "bind", "listen", "accept4", "sendto", "recvfrom", "sendmsg", "recvmsg",
    "setsockopt", "getsockopt", "shutdown", "arch_prctl", "copy_file_range", "sendfile", "close_range",
    "memfd_create", "prctl", "landlock_create_ruleset", "seccomp", "capget", "capset", "setuid", "getuid",
    "umask", "sysinfo", "times", "getrusage", "pidfd_open", "membarrier", "futex_waitv",
]  # fmt: skip


@pytest.fixture(scope="module")
def profile() -> Any:
    return load_seccomp("default", search_path=[builtin_dir()])


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_seccomp", ROOT / "scripts" / "gen_seccomp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_seccomp", module)
    spec.loader.exec_module(module)
    return module


# -- the committed file ---------------------------------------------------------------------------------


def test_committed_json_is_the_generated_one() -> None:
    gen = _gen()
    assert DEFAULT_JSON.read_text(encoding="utf-8") == gen.render(), "run: python scripts/gen_seccomp.py"
    assert gen.main(["--check"]) == 0


def test_generator_lists_are_consistent() -> None:
    gen = _gen()
    assert not set(gen.ALLOWED) & set(gen.BLOCKED)
    assert set(MUST_BLOCK) - {"personality", "clone", "socket"} <= set(gen.BLOCKED)
    assert set(gen.REMOVED_FROM_MOBY).isdisjoint(gen.ALLOWED)


def test_shape_is_oci_resolved_for_no_capabilities(profile: Any) -> None:
    raw = json.loads(DEFAULT_JSON.read_text(encoding="utf-8"))
    text = json.dumps(raw)
    for key in ("includes", "excludes", "archMap", "minKernel", "caps", "comment"):
        assert f'"{key}"' not in text
    assert raw["defaultAction"] == "SCMP_ACT_ERRNO"
    assert raw["defaultErrnoRet"] == EPERM
    assert set(raw) == {"defaultAction", "defaultErrnoRet", "architectures", "syscalls"}
    assert raw["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    actions = {rule["action"] for rule in raw["syscalls"]}
    assert actions == {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO"}
    # what the engine gets is the compact canonical form of exactly this document
    assert json.loads(profile.json_text) == raw
    assert " " not in profile.json_text.replace("SCMP_ACT", "")  # compact
    assert len(profile.sha256) == 64


def test_one_condition_per_argument_in_every_rule() -> None:
    raw = json.loads(DEFAULT_JSON.read_text(encoding="utf-8"))
    for rule in raw["syscalls"]:
        indices = [a["index"] for a in rule.get("args", [])]
        assert len(indices) == len(set(indices)), rule  # runc/gVisor would OR them


# -- what is blocked ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MUST_BLOCK)
def test_must_block_is_never_allowed_unconditionally(profile: Any, name: str) -> None:
    raw = json.loads(DEFAULT_JSON.read_text(encoding="utf-8"))
    for rule in raw["syscalls"]:
        if name in rule["names"] and rule["action"] == "SCMP_ACT_ALLOW":
            assert rule.get("args"), f"{name} allowed without an argument filter"
    assert blocked_syscalls(profile, [name]) == [name]
    # called with arguments no filter allows, it gets an errno (EPERM from the default, or ENOSYS)
    action, errno = syscall_action(profile, name, [2**64 - 1] * 6)
    assert action == "SCMP_ACT_ERRNO"
    assert errno == (ENOSYS if name == "clone3" else EPERM)


def test_blocked_syscalls_helper_keeps_order_and_filters_allowed(profile: Any) -> None:
    assert blocked_syscalls(profile, ["read", "ptrace", "write", "bpf"]) == ["ptrace", "bpf"]
    assert blocked_syscalls(profile.json_text, ["mount"]) == ["mount"]
    assert blocked_syscalls(json.loads(profile.json_text), ["openat"]) == []


def test_clone3_gets_enosys_so_glibc_falls_back_to_clone(profile: Any) -> None:
    assert syscall_action(profile, "clone3") == ("SCMP_ACT_ERRNO", ENOSYS)


@pytest.mark.parametrize(
    "flags",
    [
        CLONE_NEWUSER | SIGCHLD,
        CLONE_NEWNS | SIGCHLD,
        CLONE_NEWNET,
        CLONE_NEWPID | CLONE_NEWUSER,
        CLONE_NEWCGROUP,
        CLONE_NEWUTS,
        CLONE_NEWIPC,
        THREAD_FLAGS | CLONE_NEWUSER,
        (1 << 40) | CLONE_NEWUSER,
    ],
)
def test_clone_with_namespace_flags_is_blocked(profile: Any, flags: int) -> None:
    assert syscall_action(profile, "clone", [flags]) == ("SCMP_ACT_ERRNO", EPERM)


@pytest.mark.parametrize("flags", [SIGCHLD, THREAD_FLAGS, FORK_FLAGS, 0x4111])  # 0x4111: vfork|vm|SIGCHLD
def test_clone_without_namespace_flags_is_allowed(profile: Any, flags: int) -> None:
    assert syscall_action(profile, "clone", [flags]) == ("SCMP_ACT_ALLOW", None)


@pytest.mark.parametrize(
    ("family", "protocol"),
    [
        (AF_VSOCK, 0),
        (AF_ALG, 0),
        (AF_PACKET, 0x0300),
        (AF_NETLINK, 9),  # NETLINK_AUDIT
        (AF_NETLINK, 12),  # NETLINK_NETFILTER
        (AF_NETLINK, 15),  # NETLINK_KOBJECT_UEVENT
        (15, 2),  # AF_KEY
        (30, 0),  # AF_TIPC
        (21, 0),  # AF_RDS
        (29, 0),  # AF_CAN
        (44, 0),  # AF_XDP
        (31, 0),  # AF_BLUETOOTH
        (0x1_0000_0000 | AF_VSOCK, 0),  # the kernel truncates to int: must still fail closed
        (0x1_0000_0000 | AF_INET, 0),
    ],
)
def test_socket_families_outside_the_allowlist_are_blocked(profile: Any, family: int, protocol: int) -> None:
    assert syscall_action(profile, "socket", [family, SOCK_STREAM, protocol]) == ("SCMP_ACT_ERRNO", EPERM)


@pytest.mark.parametrize(
    ("family", "sock_type", "protocol"),
    [
        (AF_UNIX, SOCK_STREAM, 0),
        (AF_UNIX, SOCK_DGRAM | 0x80000, 0),  # SOCK_CLOEXEC
        (AF_INET, SOCK_STREAM, 6),
        (AF_INET6, SOCK_DGRAM, 17),
        (AF_NETLINK, SOCK_RAW, 0),  # NETLINK_ROUTE: getaddrinfo, ip addr
    ],
)
def test_ordinary_socket_families_are_allowed(profile: Any, family: int, sock_type: int, protocol: int) -> None:
    assert syscall_action(profile, "socket", [family, sock_type, protocol]) == ("SCMP_ACT_ALLOW", None)


def test_socketpair_is_unix_only_and_socketcall_is_blocked(profile: Any) -> None:
    assert syscall_action(profile, "socketpair", [AF_UNIX, SOCK_STREAM, 0])[0] == "SCMP_ACT_ALLOW"
    assert syscall_action(profile, "socketpair", [AF_VSOCK, SOCK_STREAM, 0])[0] == "SCMP_ACT_ERRNO"
    assert syscall_action(profile, "socketcall", [1, 0])[0] == "SCMP_ACT_ERRNO"


@pytest.mark.parametrize("persona", [0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF])
def test_safe_personalities_are_allowed(profile: Any, persona: int) -> None:
    assert syscall_action(profile, "personality", [persona])[0] == "SCMP_ACT_ALLOW"


@pytest.mark.parametrize("persona", [0x0040000, 0x0400000, 0x0200000, 0x1])  # READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE
def test_other_personalities_are_blocked(profile: Any, persona: int) -> None:
    assert syscall_action(profile, "personality", [persona]) == ("SCMP_ACT_ERRNO", EPERM)


# -- what is allowed --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_syscalls_are_allowed(profile: Any, name: str) -> None:
    assert syscall_action(profile, name, [0, 0, 0]) == ("SCMP_ACT_ALLOW", None)
    assert name in unconditionally_allowed(profile)


def test_unknown_syscalls_get_eperm(profile: Any) -> None:
    assert syscall_action(profile, "brand_new_syscall") == ("SCMP_ACT_ERRNO", EPERM)


# -- validation of seccomp files -------------------------------------------------------------------------


def _base() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DEFAULT_JSON.read_text(encoding="utf-8"))
    return data


def _invalid(data: Any) -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as info:
        validate_seccomp(data, "x.json")
    return info.value


@pytest.mark.parametrize("key", ["includes", "excludes"])
def test_conditional_keys_are_refused_anywhere(key: str) -> None:
    data = _base()
    data["syscalls"][3][key] = {"caps": ["CAP_SYS_ADMIN"]}
    err = _invalid(data)
    assert f"syscalls.3.{key}" in err.message and "containerd drops them" in err.message


def test_archmap_is_refused() -> None:
    data = _base()
    data["archMap"] = [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []}]
    assert "archMap" in _invalid(data).message


def test_default_action_allow_is_refused() -> None:
    data = _base()
    data["defaultAction"] = "SCMP_ACT_ALLOW"
    assert "defaultAction" in _invalid(data).message


def test_two_conditions_on_one_argument_are_refused() -> None:
    data = _base()
    data["syscalls"].append(
        {
            "names": ["getpriority"],
            "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}, {"index": 0, "value": 38, "op": "SCMP_CMP_NE"}],
        }
    )
    assert "two conditions on argument 0" in _invalid(data).message


def test_x86_with_socket_filters_is_refused() -> None:
    data = _base()
    data["architectures"] = [*data["architectures"], "SCMP_ARCH_X86"]
    err = _invalid(data)
    assert "SCMP_ARCH_X86" in err.message and "socketcall" in err.message


def test_a_syscall_allowed_unconditionally_must_not_appear_elsewhere() -> None:
    data = _base()
    data["syscalls"].append({"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 5})
    assert "applies to read unconditionally" in _invalid(data).message


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["syscalls"].append({"names": [], "action": "SCMP_ACT_ALLOW"}), "syscalls."),
        (lambda d: d["syscalls"].append({"names": ["Bad Name"], "action": "SCMP_ACT_ALLOW"}), "names"),
        (lambda d: d["syscalls"].append({"names": ["x"], "action": "SCMP_ACT_NOTIFY"}), "action"),
        (lambda d: d["syscalls"].append({"names": ["x"], "action": "SCMP_ACT_KILL_PROCESS"}), "action"),
        (lambda d: d["syscalls"].append({"names": ["x"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1}), "errnoRet"),
        (lambda d: d["syscalls"].append({"name": "x", "action": "SCMP_ACT_ALLOW"}), "name"),
        (lambda d: d.update(listenerPath="/run/agent.sock"), "listenerPath"),
        (lambda d: d.update(flags=["SECCOMP_FILTER_FLAG_SPEC_ALLOW"]), "flags"),
        (lambda d: d.update(architectures=["SCMP_ARCH_PDP11"]), "architectures"),
        (lambda d: d.update(defaultErrnoRet=0), "defaultErrnoRet"),
        (
            lambda d: d["syscalls"].append(
                {"names": ["x"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}
            ),
            "index",
        ),
    ],
)
def test_structure_errors_name_the_field(mutate: Any, field: str) -> None:
    data = _base()
    mutate(data)
    err = _invalid(data)
    assert err.message.startswith("x.json: ")
    assert field in err.message


def test_errors_in_a_file_name_file_and_line(tmp_path: Path) -> None:
    data = copy.deepcopy(_base())
    data["syscalls"][1]["action"] = "SCMP_ACT_MAYBE"
    path = tmp_path / "seccomp" / "bad.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(ConfigInvalid) as info:
        load_seccomp("bad", search_path=[tmp_path])
    message = info.value.message
    assert message.startswith(f"{path}:")
    line = int(message.split(":")[1])
    assert '"SCMP_ACT_MAYBE"' in path.read_text().splitlines()[line - 1]
    assert "syscalls.1.action" in message


def test_invalid_json_and_duplicate_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match=r"x\.json:2: invalid JSON"):
        parse_seccomp('{\n "a": }', "x.json")
    with pytest.raises(ConfigInvalid, match="duplicate key 'defaultAction'"):
        parse_seccomp('{"defaultAction": "SCMP_ACT_ERRNO", "defaultAction": "SCMP_ACT_ALLOW"}', "x.json")
    with pytest.raises(ConfigInvalid, match="NaN"):
        parse_seccomp('{"defaultErrnoRet": NaN}', "x.json")
    with pytest.raises(ConfigInvalid, match="must be a JSON object"):
        parse_seccomp("[]", "x.json")


def test_load_by_name_later_directory_wins_and_unknown_lists_known(tmp_path: Path) -> None:
    (tmp_path / "seccomp").mkdir()
    data = _base()
    data["syscalls"][0]["names"].remove("ioctl")
    (tmp_path / "seccomp" / "default.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "seccomp" / "strict.json").write_text(json.dumps(data), encoding="utf-8")
    overridden = load_seccomp("default", search_path=[builtin_dir(), tmp_path])
    assert overridden.source == str(tmp_path / "seccomp" / "default.json")
    assert blocked_syscalls(overridden, ["ioctl"]) == ["ioctl"]
    assert load_seccomp("strict", search_path=[builtin_dir(), tmp_path]).name == "strict"
    with pytest.raises(ConfigInvalid, match=r"no seccomp profile 'nope' \(known: default, strict\)"):
        load_seccomp("nope", search_path=[builtin_dir(), tmp_path])
    with pytest.raises(ConfigInvalid, match="not a seccomp profile name"):
        load_seccomp("../../etc/passwd", search_path=[builtin_dir()])


def test_mknod_never_makes_a_device_node() -> None:
    """Device nodes are refused by the filter itself: gVisor's tmpfs skips the kernel's CAP_MKNOD check."""
    import stat

    from orchestrator.profiles import load_seccomp, syscall_action

    profile = load_seccomp("default")
    for name, mode_index in (("mknod", 1), ("mknodat", 2)):
        for file_type, allowed in (
            (0, True),
            (stat.S_IFREG, True),
            (stat.S_IFIFO, True),
            (stat.S_IFSOCK, True),
            (stat.S_IFCHR, False),
            (stat.S_IFBLK, False),
            (stat.S_IFDIR, False),
        ):
            args = [0, 0, 0, 0]
            args[mode_index] = file_type | 0o666
            action, _ = syscall_action(profile, name, args)
            assert (action == "SCMP_ACT_ALLOW") == allowed, (name, oct(file_type), action)
