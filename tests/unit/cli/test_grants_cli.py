"""sandboxctl grants without a service: its options are checked before anything is sent (errors name the
option, with the stable code and its exit status), an absent service is SANDBOX.UNAVAILABLE, and the token
is never shown. (Against the running service: tests/api/test_api_grants.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from orchestrator.cli.main import main

SECRET = "s3cret-token-value-0123456789"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_TOKEN", raising=False)
    monkeypatch.delenv("SANDBOX_URL", raising=False)


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["grants", *argv])
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "Traceback" not in err
    return code, out, err


CREATE = ("create", "--tenant", "team-a", "--reason", "ci", "--url", closed_url())


def test_no_token_is_refused_before_anything_is_sent(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list", "--url", closed_url(), "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "INPUT.INVALID"
    assert "--token-file" in err and "$SANDBOX_TOKEN" in err


def test_an_unreadable_token_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "list", "--token-file", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("sandboxctl: INPUT.INVALID: --token-file: cannot read it")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, _, err = run(capsys, "list", "--token-file", str(empty))
    assert code == 2 and "--token-file: the file is empty" in err


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (("--ttl", "soon"), "--ttl"),
        (("--ttl", "0"), "--ttl"),
        (("--expires", "2030-01-01T00:00:00"), "--expires"),  # no zone: ambiguous
        (("--expires", "tomorrow"), "--expires"),
        (("--executions", "0"), "--executions"),
        (("--executions", "²"), "--executions"),
        (("--output-bytes", "lots"), "--output-bytes"),
        (("--cpu-seconds", "-1"), "--cpu-seconds"),
        ((), "--ttl"),  # nothing bounds it
    ],
)
def test_bad_options_name_the_option(capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], option: str) -> None:
    code, out, err = run(capsys, *CREATE, "--token", SECRET, *extra, "--json")
    assert code == 2, err
    error = json.loads(out)["error"]
    assert error["code"] == "INPUT.INVALID" and error["message"].startswith(option)


def test_sizes_and_durations_are_read_like_the_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli.grants_cmd import _seconds, _size

    assert _size("10m", "--output-bytes") == 10 * 1024 * 1024 and _size("512", "--output-bytes") == 512
    assert _seconds("90", "--ttl") == 90 and _seconds("30m", "--ttl") == 1800 and _seconds("1.5h", "--ttl") == 5400
    assert _seconds("7d", "--ttl") == 7 * 86400


def test_a_service_that_does_not_answer_is_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *CREATE, "--token", SECRET, "--executions", "3", "--json")
    assert code == 125 and json.loads(out)["error"]["code"] == "SANDBOX.UNAVAILABLE"
    code, _, err = run(capsys, "show", "grt_x", "--url", closed_url(), "--token", SECRET)
    assert code == 125 and err.startswith("sandboxctl: SANDBOX.UNAVAILABLE:")


def test_a_bad_url_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "list", "--url", "ftp://x", "--token", SECRET)
    assert code == 2 and "--url" in err


def test_usage_errors_are_input_invalid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "create", "--tenant", "t", "--token", SECRET, "--json")  # no --reason
    assert code == 2 and json.loads(out)["error"]["code"] == "INPUT.INVALID"
    code, _, err = run(capsys, *CREATE, "--ttl", "60", "--expires", "2030-01-01T00:00:00Z")
    assert code == 2 and "not allowed with argument" in err
    code, _, err = run(capsys, "list", "--state", "bogus")
    assert code == 2 and "invalid choice" in err
