"""What fixes what ``sandboxctl doctor`` finds missing on a cluster: commands a person can paste, one a line.

The namespace's commands are the same as docs/kubernetes.md's ("A sandbox namespace without the chart"),
which a test applies to the real cluster (tests/unit/docs checks that the two stay the same text).
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.backends.checks import DoctorFixes

DOC = 'docs/kubernetes.md ("A sandbox namespace without the chart")'
CHART = "charts/sandbox-orchestrator"

DOCTOR_FIXES = DoctorFixes(
    engine="check backend.kubernetes.kubeconfig (or $KUBECONFIG; in a pod: its ServiceAccount's token): its"
    " server must answer and accept its credentials (`kubectl --kubeconfig FILE version` shows both)",
    runtime="map the profile's runtime to a RuntimeClass in backend.kubernetes.runtime_classes (runsc: gvisor;"
    " the chart's gvisor.runtimeClass), or use a runc profile",
    image="make the image available to every node (a registry they pull from, or loaded into each node's runtime)",
    limits="the probe pod's error says what its node lacked (an image, the seccomp profile: docs/kubernetes.md)",
)


def pod_security_command(namespace: str) -> str:
    return (
        f"kubectl label --overwrite namespace {namespace} pod-security.kubernetes.io/enforce=restricted"
        " pod-security.kubernetes.io/enforce-version=latest"
    )


def network_policy_command(namespace: str) -> str:
    """A default-deny NetworkPolicy (every pod, ingress and egress, no rule), as one line of YAML."""
    return (
        "echo '{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: default-deny},"
        f" spec: {{podSelector: {{}}, policyTypes: [Ingress, Egress]}}}}' | kubectl apply -n {namespace} -f -"
    )


def namespace_commands(namespace: str) -> str:
    """The namespace as the backend needs it (docs/kubernetes.md shows the same lines for ``sandboxes``)."""
    return "\n".join(
        [f"kubectl create namespace {namespace}", pod_security_command(namespace), network_policy_command(namespace)]
    )


def namespace_fix(namespace: str) -> str:
    return (
        f"{namespace_commands(namespace)}\n"
        f"then the Role and RoleBinding of the controller's identity there: {DOC}; or install the chart ({CHART}),"
        " which makes all of it"
    )


def role_rules(missing: Iterable[tuple[str, str, str, str]]) -> list[str]:
    """The Role rules that grant ``missing`` ((verb, resource, subresource, group)), one per resource."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for verb, resource, sub, group in missing:
        verbs.setdefault((group, f"{resource}/{sub}" if sub else resource), []).append(verb)
    return [
        f'- {{apiGroups: ["{group}"], resources: [{resource}], verbs: [{", ".join(vs)}]}}'
        for (group, resource), vs in verbs.items()
    ]


def permissions_fix(namespace: str, missing: Iterable[tuple[str, str, str, str]]) -> str:
    rules = "\n".join(role_rules(missing))
    return (
        f"add to the Role bound to the controller's identity in namespace {namespace} (the chart's, or {DOC}):\n{rules}"
    )


def runtime_class_fix(runtime: str, klass: str) -> str:
    return (
        f"create RuntimeClass {klass}, its handler the one the nodes' container runtime registered ({runtime} here):\n"
        f"echo '{{apiVersion: node.k8s.io/v1, kind: RuntimeClass, metadata: {{name: {klass}}}, handler: {runtime}}}'"
        " | kubectl apply -f -\n"
        f"(the chart's gvisor.runtimeClass.create does it), or map runtime {runtime} to an existing one in"
        " backend.kubernetes.runtime_classes"
    )
