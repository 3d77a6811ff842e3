"""The doctor's fixes for a cluster are text a person pastes: Role rules that parse as YAML and grant exactly
what is missing, commands for the namespace that name it."""

from __future__ import annotations

import yaml

from orchestrator.backends.kubernetes.preflight import NEEDED
from orchestrator.backends.kubernetes.remedies import namespace_commands, permissions_fix, role_rules


def test_role_rules_grant_exactly_what_is_missing() -> None:
    rules = [yaml.safe_load(line)[0] for line in role_rules(NEEDED)]
    granted = {
        (verb, resource, group)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {(verb, f"{res}/{sub}" if sub else res, group) for verb, res, sub, group in NEEDED}
    assert len(rules) == len({(group, res, sub) for _, res, sub, group in NEEDED})  # one rule a resource


def test_the_permissions_fix_names_the_namespace_then_the_rules() -> None:
    first, *rules = permissions_fix("sbx", [("delete", "leases", "", "coordination.k8s.io")]).splitlines()
    assert "namespace sbx" in first
    assert rules == ['- {apiGroups: ["coordination.k8s.io"], resources: [leases], verbs: [delete]}']


def test_the_namespace_commands_make_it_restricted_with_a_default_deny_policy() -> None:
    create, label, policy = namespace_commands("sbx").splitlines()
    assert create == "kubectl create namespace sbx"
    assert "namespace sbx pod-security.kubernetes.io/enforce=restricted" in label
    manifest = yaml.safe_load(policy.split("'")[1])
    assert manifest["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert policy.endswith("| kubectl apply -n sbx -f -")
