"""The documented namespace is the doctor's fix and the chart's Role, so one cannot change without the others."""

from __future__ import annotations

from orchestrator.backends.kubernetes.preflight import NEEDED
from orchestrator.backends.kubernetes.remedies import namespace_commands, namespace_fix
from tests.support.chart import BASE_RULES
from tests.support.namespace_doc import ACCOUNT, ACCOUNT_NAMESPACE, NAMESPACE, blocks, renamed, role_documents


def test_the_documented_namespace_commands_are_what_the_doctor_prints() -> None:
    namespace, _ = blocks()
    assert namespace.strip() == namespace_commands(NAMESPACE)
    assert namespace_fix(NAMESPACE).startswith(namespace.strip() + "\n")


def test_the_documented_role_is_the_charts() -> None:
    role, binding = role_documents()
    assert role["kind"] == "Role" and role["rules"] == BASE_RULES
    granted = {
        (verb, resource, group)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for verb, resource, sub, group in NEEDED:
        assert (verb, f"{resource}/{sub}" if sub else resource, group) in granted
    assert binding["kind"] == "RoleBinding" and binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}]


def test_renaming_touches_whole_names_only() -> None:
    text = "kubectl create namespace sandboxes # sandboxes-x, my-sandboxes, sandbox-system, sandbox-systems"
    assert renamed(text, "ns1", "ns2") == (
        "kubectl create namespace ns1 # sandboxes-x, my-sandboxes, ns2, sandbox-systems"
    )
