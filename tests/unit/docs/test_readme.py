from __future__ import annotations

import re

from orchestrator.domain.errors import all_error_types
from tests.support.paths import DOCS

# the reference moved from the README into docs/: the error-code table and the profile mapping table
ERRORS = (DOCS / "errors.md").read_text()
KUBERNETES = (DOCS / "kubernetes.md").read_text()


def test_every_error_code_is_in_the_error_table() -> None:
    table = set(re.findall(r"^\| `([A-Z_]+(?:\.[A-Z_]+)?)` \|", ERRORS, flags=re.M))
    codes = {cls.code for cls in all_error_types()}
    assert codes <= table, codes - table


def test_every_doctor_code_is_in_the_error_table() -> None:
    """The doctor's check codes are in the same one table, as codes the CLI exits 1 with and no service serves."""
    from typing import get_args

    from orchestrator.backends.checks import CheckCode

    rows = dict(re.findall(r"^\| `(DOCTOR\.[A-Z_]+)` \|.*\| (\S+) \| (?:—) \|$", ERRORS, flags=re.M))
    assert set(rows) == set(get_args(CheckCode))
    assert set(rows.values()) == {"1"}


def test_codes_are_unique_per_class() -> None:
    by_code: dict[str, list[str]] = {}
    for cls in all_error_types():
        by_code.setdefault(cls.code, []).append(cls.__name__)
    duplicated = {c: names for c, names in by_code.items() if len(names) > 1 and c != "INTERNAL"}
    assert not duplicated


def test_the_http_column_matches_each_codes_status() -> None:
    rows = dict(
        re.findall(r"^\| `([A-Z_]+(?:\.[A-Z_]+)?)` \|.*\| (\d{3}|in the execution \(200\)) \|$", ERRORS, flags=re.M)
    )
    for cls in all_error_types():
        if cls.__name__ == "OrchestratorError":
            continue
        expected = str(cls.http_status) if cls.http_status else "in the execution (200)"
        assert rows.get(cls.code) == expected, cls.code


def test_the_warm_server_preloads_no_http_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from orchestrator.cli.warm.server import preload; preload();"
        " print(sorted(m for m in ('aiohttp', 'prometheus_client', 'orchestrator.api') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_profile_mapping_table_is_the_backends_own() -> None:
    from orchestrator.backends.kubernetes.manifest import PROFILE_MAPPING

    for field, docker, pod in PROFILE_MAPPING:
        assert f"| `{field}` | {docker} | {pod} |" in KUBERNETES, field
