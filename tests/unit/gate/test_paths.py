"""Path analysis with real directories and real symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.domain.sanitized import RiskLevel
from orchestrator.gate.paths import (
    MAX_BRACE_WORDS,
    assess_paths,
    credential_reason,
    escapes_workspace,
    expand_braces,
    glob_reason,
    has_glob,
)


@pytest.mark.parametrize(
    ("path", "label"),
    [
        (".env", ".env"),
        ("app/.env.local", ".env"),
        (".env.production", ".env"),
        (".envrc", ".envrc"),
        ("~/.ssh/id_rsa", ".ssh"),
        ("/home/u/.ssh/authorized_keys", ".ssh"),
        (".ssh", ".ssh"),
        ("keys/id_ed25519", "id_*"),
        ("id_rsa", "id_*"),
        ("certs/server.pem", "*.pem"),
        ("tls.KEY", "*.key"),
        ("store.p12", "*.p12"),
        ("store.pfx", "*.pfx"),
        ("~/.aws/credentials", ".aws"),
        ("/root/.aws/config", ".aws"),
        ("credentials", "credentials"),
        ("gcp/credentials.json", "credentials.json"),
        ("~/.netrc", ".netrc"),
        (".npmrc", ".npmrc"),
        (".pypirc", ".pypirc"),
        (".git-credentials", ".git-credentials"),
        ("~/.docker/config.json", ".docker/config.json"),
        ("kubeconfig", "kubeconfig"),
        ("~/.kube/config", ".kube/config"),
        ("/etc/shadow", "/etc/shadow"),
        ("/etc/gshadow", "/etc/gshadow"),
        ("/etc/sudoers", "/etc/sudoers"),
        ("/etc/sudoers.d/admins", "/etc/sudoers"),
        ("~/.gnupg/private-keys-v1.d", ".gnupg"),
        ("deploy/secrets.yaml", "secrets.yaml"),
        ("secrets.yml", "secrets.yml"),
        ("/proc/1/environ", "process environ"),
        ("/var/run/secrets/kubernetes.io/serviceaccount/token", "run/secrets"),
        ("/etc/ssh/ssh_host_ed25519_key", "ssh host key"),
        ('"$HOME/.ssh/id_rsa"', ".ssh"),
        ("--identity=~/.ssh/k", ".ssh"),
        ("user@host:.ssh/id_rsa", ".ssh"),
        ("C:/Users/X/.SSH/config", ".ssh"),
    ],
)
def test_credential_paths(path: str, label: str) -> None:
    assert credential_reason(path) == f"credential path ({label})"


@pytest.mark.parametrize(
    "path",
    [
        "src/app.py",
        ".env.example",
        ".env.sample",
        "environment.py",
        "id_rsa.pub",
        "my_keys.txt",
        "keyboard.py",
        "ssh_config.md",
        "/etc/passwd",
        "/etc/hosts",
        "credentials.py",
        "secretary.yaml",
        "tests/unit/test_paths.py",
        "-la",
        "",
    ],
)
def test_not_credentials(path: str) -> None:
    assert credential_reason(path) is None


def test_escapes_without_workspace() -> None:
    assert escapes_workspace("src/a.py", workspace=None) is None
    assert escapes_workspace("a/../b", workspace=None) is None
    assert escapes_workspace("/etc/passwd", workspace=None) == "leaves the workspace (/etc/passwd: absolute path)"
    assert escapes_workspace("../x", workspace=None) == "leaves the workspace (../x)"
    assert escapes_workspace("a/../../x", workspace=None) is not None
    assert escapes_workspace("..", workspace=None) is not None
    assert escapes_workspace("x", workspace=None, cwd="..") is not None
    assert escapes_workspace("~/.bashrc", workspace=None) is not None


def test_escapes_lexically(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert escapes_workspace("src/a.py", workspace=ws) is None
    assert escapes_workspace(str(ws / "a.py"), workspace=ws) is None
    assert escapes_workspace(".", workspace=ws) is None
    assert escapes_workspace("../ws/a", workspace=ws) is None
    assert escapes_workspace("../other", workspace=ws) == "leaves the workspace (../other)"
    assert escapes_workspace("/etc/passwd", workspace=ws) is not None
    assert escapes_workspace(str(tmp_path / "ws2" / "x"), workspace=ws) is not None  # prefix is not containment
    # cwd is relative to the workspace
    (ws / "sub").mkdir()
    assert escapes_workspace("../a", workspace=ws, cwd="sub") is None
    assert escapes_workspace("../../a", workspace=ws, cwd="sub") is not None
    assert escapes_workspace("a", workspace=ws, cwd="..") is not None
    assert escapes_workspace("a", workspace=str(ws), cwd=str(ws / "sub")) is None


def test_workspace_that_does_not_exist_is_checked_lexically() -> None:
    assert escapes_workspace("a/b", workspace="/nonexistent/ws") is None
    assert escapes_workspace("../b", workspace="/nonexistent/ws") is not None


def test_symlink_pointing_outside_leaves(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "inner").mkdir()
    os.symlink(outside, ws / "link")
    os.symlink(ws / "inner", ws / "inlink")
    os.symlink("/etc", ws / "etc")
    reason = escapes_workspace("link/file.txt", workspace=ws)
    assert reason is not None and "through a symlink" in reason
    assert escapes_workspace("link", workspace=ws) is not None
    assert escapes_workspace("inlink/file.txt", workspace=ws) is None  # stays inside
    assert escapes_workspace("sub/../link/x", workspace=ws) is not None
    assert escapes_workspace("new/dir/file", workspace=ws) is None  # not existing yet: fine
    # the workspace itself reached through a symlink is still the workspace
    os.symlink(ws, tmp_path / "ws-link")
    assert escapes_workspace("a.txt", workspace=tmp_path / "ws-link") is None
    assert escapes_workspace(str(ws / "a.txt"), workspace=tmp_path / "ws-link") is not None  # lexically outside
    # a symlinked cwd
    assert escapes_workspace("x", workspace=ws, cwd="link") is not None


def test_assess_paths_levels(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink("/etc", ws / "etc-link")
    os.symlink(tmp_path, ws / "up")
    findings = assess_paths(
        ["ok.txt", ".env", "../x", "/usr/bin/x", "etc-link/hosts", "up/y", "/etc/shadow"], workspace=ws
    )
    got = [(f.level, f.reason) for f in findings]
    assert (RiskLevel.HIGH, "credential path (.env): .env") in got
    assert (RiskLevel.HIGH, "path leaves the workspace (../x)") in got
    assert (RiskLevel.CRITICAL, "path leaves the workspace (/usr/bin/x)") in got
    assert any(level is RiskLevel.CRITICAL and "etc-link/hosts" in reason for level, reason in got)
    assert any(level is RiskLevel.HIGH and "up/y" in reason for level, reason in got)
    assert (RiskLevel.HIGH, "credential path (/etc/shadow): /etc/shadow") in got
    assert (RiskLevel.CRITICAL, "path leaves the workspace (/etc/shadow)") in got
    assert not any("ok.txt" in reason for _, reason in got)
    assert assess_paths([], workspace=ws) == []


# --------------------------------------------------------------------------------------------
# respelled paths, brace expansion, globs


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/etc//shadow", "/etc/shadow"),
        ("/etc/./shadow", "/etc/shadow"),
        ("/etc/ssl/../shadow", "/etc/shadow"),
        ("/proc/self/root/etc/shadow", "/etc/shadow"),
        ("/etc/{shadow,hosts}", "/etc/shadow"),
        ("/etc/{hosts,passwd,shadow}", "/etc/shadow"),
        ("~/.{ssh,aws}/x", ".ssh"),
        ("keys/id_{rsa,x}", "id_*"),
        ("/etc/sh{a,o}dow", "/etc/shadow"),
        ("/etc/{x,{y,shadow}}", "/etc/shadow"),
    ],
)
def test_respelled_credential_paths(path: str, label: str) -> None:
    assert credential_reason(path) == f"credential path ({label})"


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/etc/shad*", "/etc/shadow"),
        ("/etc/shado[w]", "/etc/shadow"),
        ("/etc/sh?dow", "/etc/shadow"),
        ("/etc/[s]hadow", "/etc/shadow"),
        ("/etc/gsha*", "/etc/gshadow"),
        ("/etc/sudo*", "/etc/sudoers"),
        ("/e??/shadow", "/etc/shadow"),
        ("/etc/*", "/etc/shadow"),
        ("/etc/ssh/ssh_host_*", "ssh host key"),
        ("/run/secr*", "run/secrets"),
        ("~/.ss?/x", ".ssh"),
        ("/x/.aw[s]/config", ".aws"),
        ("~/.kube/conf*", ".kube/config"),
        (".en?", ".env"),
        (".env*", ".env"),
        (".e[n]v", ".env"),
        ("id_*", "id_*"),
        ("?d_rsa", "id_*"),
        ("*.pe?", "*.pem"),
        ("server.*", "*.pem"),
        ("tls.[k]ey", "*.key"),
        ("cred*", "credentials"),
        ("*credentials*", "credentials"),
        ("kube*", "kubeconfig"),
        (".git-cred*", ".git-credentials"),
        (".net[r]c", ".netrc"),
        (".*", ".env"),
        ("secrets.y*", "secrets.yaml"),
        ("/etc/shado[[:alpha:]]", "/etc/shadow"),
        ("/etc/shado[![:digit:]]", "/etc/shadow"),
        ("/etc/shado[[:print:]]", "/etc/shadow"),
        ("/etc/[[.s.]]hadow", "/etc/shadow"),
        ("/etc/[^x]hadow", "/etc/shadow"),
        ("/etc/sha[]d]ow", "/etc/shadow"),
    ],
)
def test_globs_that_may_match_credentials(path: str, label: str) -> None:
    assert credential_reason(path) == f"glob may match a credential path ({label})"


@pytest.mark.parametrize(
    "path",
    ["*", "*.py", "src/*.ts", "test_*", "*.md", "a?b", "docs/[a-c]*.rst", "*.env.example", "/tmp/*", "[!.]*.txt"],
)
def test_globs_that_cannot_match_credentials(path: str) -> None:
    assert credential_reason(path) is None


def test_a_leading_dot_must_be_matched_explicitly() -> None:
    # bash's * and ? do not match a leading '.': */x never reaches .ssh/x
    assert credential_reason("~/*/id_rsa") == "credential path (id_*)"
    assert credential_reason("~/?ssh/config") is None
    assert credential_reason("~/.ss?/config") == "glob may match a credential path (.ssh)"
    assert credential_reason("[.]env") is None  # bash: a bracket does not match a leading '.'
    assert credential_reason(".[e]nv") == "glob may match a credential path (.env)"


def test_expand_braces() -> None:
    assert expand_braces("a{b,c}d") == ["abd", "acd"]
    assert expand_braces("{a,b}{c,d}") == ["ac", "ad", "bc", "bd"]
    assert expand_braces("x{1..3}") == ["x1", "x2", "x3"]
    assert expand_braces("x{3..1}") == ["x3", "x2", "x1"]
    assert expand_braces("{a..c}") == ["a", "b", "c"]
    assert expand_braces("{1..9..4}") == ["1", "5", "9"]
    assert expand_braces("a{b,{c,d}}") == ["ab", "ac", "ad"]
    assert expand_braces("{x}y") == ["{x}y"]  # no comma, no sequence: literal
    assert expand_braces("${X}/{a,b}") == ["${X}/a", "${X}/b"]
    assert expand_braces("${X:-a,b}") == ["${X:-a,b}"]
    assert expand_braces("a\\{b,c}") == ["a\\{b,c}"]
    assert expand_braces("{unclosed,") == ["{unclosed,"]
    assert len(expand_braces("{1..100000}")) == MAX_BRACE_WORDS
    assert len(expand_braces("{a,b}" * 20)) == MAX_BRACE_WORDS
    assert expand_braces("plain") == ["plain"]


def test_glob_reason() -> None:
    assert glob_reason("/etc/*.conf") == "glob in a path under /etc"
    assert glob_reason("/root/*") == "glob in a path under /root"
    assert glob_reason("/var/run/*") == "glob in a path under /var/run"
    assert glob_reason("/proc/[0-9]*/cmdline") == "glob in a path under /proc"
    assert glob_reason("~/*.txt") == "glob in a path under ~"
    assert glob_reason('"$HOME"/*') == "glob in a path under $HOME"
    assert glob_reason("${HOME}/x*") == "glob in a path under $HOME"
    assert glob_reason("--include=/etc/*") == "glob in a path under /etc"
    assert glob_reason("/etc/hosts") is None
    assert glob_reason("src/*.py") is None
    assert glob_reason("/tmp/*") is None
    assert has_glob("a*") and has_glob("a?") and has_glob("a[b]") and not has_glob("a{b,c}")


def test_assess_paths_flags_globbed_paths(tmp_path: Path) -> None:
    findings = assess_paths(["/etc/shad*"], workspace=tmp_path)
    assert (RiskLevel.HIGH, "glob may match a credential path (/etc/shadow): /etc/shad*") in [
        (f.level, f.reason) for f in findings
    ]
