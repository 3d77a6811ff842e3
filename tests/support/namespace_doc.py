"""docs/kubernetes.md's "A sandbox namespace without the chart", as its two shell blocks: the namespace (what
``sandboxctl doctor`` prints for a missing one) and the controller's Role. The unit tests compare them with
the doctor's fix and the chart's Role; tests/k8s runs them on the real cluster, as written."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.support.paths import DOCS

SECTION = "**A sandbox namespace without the chart.**"
#: the names the documented commands use, which a test replaces with its own (whole words only)
NAMESPACE = "sandboxes"
ACCOUNT_NAMESPACE = "sandbox-system"
ACCOUNT = "sandbox-controller"


def blocks() -> tuple[str, str]:
    text = (DOCS / "kubernetes.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    found = re.findall(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M)
    assert len(found) >= 2, f"{SECTION}: two sh blocks expected, found {len(found)}"
    return found[0], found[1]


def renamed(block: str, namespace: str, account_namespace: str) -> str:
    block = re.sub(rf"(?<![\w-]){re.escape(ACCOUNT_NAMESPACE)}(?![\w-])", account_namespace, block)
    return re.sub(rf"(?<![\w-]){re.escape(NAMESPACE)}(?![\w-])", namespace, block)


def role_documents() -> list[dict[str, Any]]:
    """The Role and RoleBinding of the second block (the YAML between its here-document's markers)."""
    _, rbac = blocks()
    body = rbac.split("<<'EOF'\n", 1)[1].rsplit("EOF", 1)[0]
    return [doc for doc in yaml.safe_load_all(body) if doc]
