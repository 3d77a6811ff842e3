"""What ``sandboxctl doctor`` checks on a cluster, with the controller's own credentials. Blocking.

The controller has no cluster-wide rights by design (a Role in the sandbox namespace only), so what it
cannot read it tests by asking the API server to admit a pod without keeping it (``dryRun=All``). That pod
is the backend's own sandbox pod (``manifest.pod_manifest``, with its resources: a ResourceQuota or LimitRange
admits it as it admits real sandboxes): the namespace exists where it is admitted (a missing one is the API
server's NotFound; with a Role only there, RBAC refuses first, and an identity with no right at all there is
told the namespace may not exist); PodSecurity ``restricted`` enforced is a weakened pod refused; a
RuntimeClass present is a pod naming it admitted. The permissions are asked with SelfSubjectAccessReviews,
which every identity may send. A refusal of ``system:anonymous`` names the credentials.

Each failure names its own cause and fix (remedies.py); what depends on a check that failed is reported
as not checked, never as a failure of its own with a guessed fix (a missing namespace refuses every pod).
"""

from __future__ import annotations

import functools
import posixpath
import time
from collections.abc import Callable
from typing import Any

from orchestrator.backends.base import LaunchSpec, Workspace
from orchestrator.backends.checks import ENGINE_FAILED, PreflightCheck, failed, not_checked
from orchestrator.backends.kubernetes.kube import JsonObject, KubeClient, KubeError
from orchestrator.backends.kubernetes.manifest import pod_manifest
from orchestrator.backends.kubernetes.remedies import (
    DOC,
    namespace_fix,
    network_policy_command,
    permissions_fix,
    pod_security_command,
    runtime_class_fix,
)
from orchestrator.backends.kubernetes.settings import KubernetesSettings
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.ids import new_execution_id
from orchestrator.profiles import ProfileRegistry, ResolvedProfile

#: (verb, resource, subresource, group): what the backend does, and so what its Role must allow
NEEDED: tuple[tuple[str, str, str, str], ...] = (
    ("create", "pods", "", ""),
    ("get", "pods", "", ""),
    ("list", "pods", "", ""),
    ("watch", "pods", "", ""),
    ("patch", "pods", "", ""),
    ("delete", "pods", "", ""),
    # the command's stdio, relayed from the sidecar, and copy mode's tar streams (a websocket: a GET
    # upgrade, and create where the API server asks for it)
    ("create", "pods", "exec", ""),
    ("get", "pods", "exec", ""),
    ("list", "events", "", ""),
    ("list", "networkpolicies", "", "networking.k8s.io"),
    ("get", "leases", "", "coordination.k8s.io"),
    ("create", "leases", "", "coordination.k8s.io"),
    ("update", "leases", "", "coordination.k8s.io"),
    ("list", "leases", "", "coordination.k8s.io"),
    ("delete", "leases", "", "coordination.k8s.io"),
)
#: the API server took the caller for system:anonymous
ANONYMOUS_FIX = (
    "give backend.kubernetes.kubeconfig (or $KUBECONFIG; in a pod: its ServiceAccount's token) credentials the API"
    " server accepts: it received none it recognises (`kubectl --kubeconfig FILE auth whoami` shows who it takes"
    " them for)"
)
#: where the API server's own message is the best guide there is (an unexpected refusal or failure)
READ_MESSAGE = "the API server's message says why; run the doctor again once that is fixed"

#: the profile whose pod the dry runs send when the caller names none: the built-in one most runs get (the
#: gate's default profile), as the backend would launch it
PROBE_PROFILE = "workspace-write"
PROBE_LABEL = "org.sandbox-orchestrator.preflight"


@functools.cache
def builtin_probe_profile() -> ResolvedProfile:
    """The built-in PROBE_PROFILE, resolved (no caps): the pod of a run that names no profile."""
    return ProfileRegistry(extra_dirs=[]).resolve(PROBE_PROFILE)


def probe_pod(
    settings: KubernetesSettings,
    profile: ResolvedProfile | None = None,
    change: Callable[[JsonObject], None] | None = None,
) -> JsonObject:
    """The pod the backend launches for a run of ``profile`` (``manifest.pod_manifest``: its resources, requests
    and limits, hardening, volumes), under a generated name and labelled as the doctor's, ``change``d. Sent as a
    dry run only: what a namespace admits (a ResourceQuota, a LimitRange, Pod Security) is what it would admit
    for a real sandbox, never a hand-written pod's fate."""
    chosen = profile if profile is not None else builtin_probe_profile()
    root = posixpath.normpath(settings.workspace.root)
    spec = LaunchSpec(
        execution_id=new_execution_id(),
        argv=("true",),
        profile=chosen,
        workspace=Workspace(posixpath.join(root, "sandbox-doctor")),  # below the claim's root: a sub-path of it
        workdir=chosen.workspace.container_path,
        env={},
        owner="",
        deadline_unix=time.time() + chosen.wall_timeout_s,
    )
    pod = pod_manifest(spec, settings)
    metadata = pod["metadata"]
    del metadata["name"]
    metadata["generateName"] = "so-preflight-"
    metadata["labels"] = {**metadata["labels"], PROBE_LABEL: "true"}
    if change is not None:
        change(pod)
    return pod


def _weaken(pod: JsonObject) -> None:
    """What only ``restricted`` refuses (``baseline`` and the API server itself allow it): a namespace that
    enforces less admits this pod, so it is not mistaken for one that enforces ``restricted``."""
    container: dict[str, Any] = pod["spec"]["containers"][0]
    container["securityContext"]["allowPrivilegeEscalation"] = True


def denies_all(policy: JsonObject) -> bool:
    """A NetworkPolicy for every pod, both directions, allowing nothing."""
    spec = policy.get("spec") or {}
    types = set(spec.get("policyTypes") or [])
    return (
        spec.get("podSelector") in ({}, {"matchLabels": {}}, None)
        and {"Ingress", "Egress"} <= types
        and not spec.get("ingress")
        and not spec.get("egress")
    )


def refusal(
    kube: KubeClient,
    settings: KubernetesSettings,
    profile: ResolvedProfile | None = None,
    change: Callable[[JsonObject], None] | None = None,
) -> KubeError | None:
    """Why the API server would not admit the probe pod (``profile``'s, ``change``d) in the sandbox namespace
    (dry run); None: admitted."""
    try:
        kube.create_pod(settings.namespace, probe_pod(settings, profile, change), dry_run=True)
    except KubeError as exc:
        return exc
    return None


def namespace_missing(exc: KubeError, namespace: str) -> bool:
    """The API server's NotFound for the namespace itself (a create in a namespace that does not exist)."""
    return exc.kind == "not_found" and f'namespaces "{namespace}" not found' in exc.message


def _may_not_create_pods(exc: KubeError) -> bool:
    return exc.kind == "forbidden" and 'cannot create resource "pods"' in exc.message


def missing_namespace(kube: KubeClient, settings: KubernetesSettings, profile: ResolvedProfile | None = None) -> bool:
    """Whether the sandbox namespace does not exist, as far as a pod's dry run there shows (a refusal for another
    reason, or one this identity may not ask, is not taken for a missing namespace)."""
    exc = refusal(kube, settings, profile)
    return exc is not None and namespace_missing(exc, settings.namespace)


def network_policy_problem(
    kube: KubeClient, settings: KubernetesSettings, profile: ResolvedProfile | None = None
) -> SandboxUnavailable | None:
    """Why pods of the sandbox namespace would have network: no default-deny NetworkPolicy (every pod, both
    directions), or no namespace at all; None when one is there. Raises ``KubeError`` when the policies
    cannot be read."""
    namespace = settings.namespace
    if any(denies_all(policy) for policy in kube.list_network_policies(namespace)):
        return None
    # a namespace that does not exist lists no policy either: its absence is the cause to name
    if missing_namespace(kube, settings, profile):
        return SandboxUnavailable(
            f"namespace {namespace} does not exist: create it as {DOC} shows (labelled for Pod Security"
            " restricted, with a default-deny NetworkPolicy and the controller's Role), or install the chart;"
            " `sandboxctl doctor --config FILE` checks it",
            details={"namespace": namespace},
        )
    return SandboxUnavailable(
        f"namespace {namespace} has no default-deny NetworkPolicy (podSelector {{}}, ingress and egress, no"
        " rules): sandbox pods would have network; the chart creates one",
        details={"namespace": namespace},
    )


def runtime_class_use(klass: str) -> Callable[[JsonObject], None]:
    def use(pod: JsonObject) -> None:
        pod["spec"]["runtimeClassName"] = klass

    return use


def _runtime_names(settings: KubernetesSettings) -> list[str]:
    return [f"RuntimeClass {klass} (runtime {runtime})" for runtime, klass in sorted(settings.runtime_classes.items())]


def unchecked(settings: KubernetesSettings, because: str = ENGINE_FAILED) -> list[PreflightCheck]:
    """Every cluster check, not made (``because``): listed as skipped, never left out of the report."""
    names = [
        f"namespace {settings.namespace}",
        "PodSecurity restricted",
        "default-deny NetworkPolicy",
        *_runtime_names(settings),
        "permissions",
    ]
    return [not_checked(name, because) for name in names]


def anonymous(exc: KubeError) -> bool:
    """The API server took the caller for ``system:anonymous``: its credentials were not sent or not recognised
    (where anonymous requests are enabled, /version still answers them)."""
    return exc.kind == "forbidden" and 'User "system:anonymous"' in exc.message


def cluster_checks(
    kube: KubeClient, settings: KubernetesSettings, profile: ResolvedProfile | None = None
) -> list[PreflightCheck]:
    """The dry runs send ``profile``'s pod (None: the built-in PROBE_PROFILE's). Each check skipped when the API
    server does not answer: the doctor's engine check reports that (the same call)."""
    namespace = settings.namespace
    try:
        kube.version()
    except KubeError:
        return unchecked(settings)
    runtime_names = _runtime_names(settings)
    dependent = ["PodSecurity restricted", "default-deny NetworkPolicy", *runtime_names, "permissions"]
    exc = refusal(kube, settings, profile)
    if exc is not None and anonymous(exc):
        return [
            failed(
                "credentials",
                "DOCTOR.ENGINE",
                f"the API server takes them for system:anonymous: {exc.message}",
                ANONYMOUS_FIX,
            ),
            *unchecked(settings, "credentials failed (above)"),
        ]
    if exc is not None and namespace_missing(exc, namespace):
        # every pod is refused there and its Role cannot exist: the one cause, said once, with its fix
        gone = f"namespace {namespace} does not exist"
        return [
            failed(
                f"namespace {namespace}",
                "DOCTOR.NAMESPACE",
                f"does not exist (the API server: {exc.message})",
                namespace_fix(namespace),
            ),
            *(not_checked(name, gone) for name in dependent),
        ]
    if exc is not None and _may_not_create_pods(exc) and not _granted(kube, namespace):
        # with a Role only in the sandbox namespace (the controller's), a namespace that does not exist is refused
        # by RBAC before the API server looks for it: no right at all there is what a missing namespace looks like
        return [
            failed(
                f"namespace {namespace}",
                "DOCTOR.NAMESPACE",
                "may not exist: this identity has no right there (with a Role only in that namespace, the API server"
                f" refuses before it looks for the namespace), or no Role there is bound to it: {exc.message}",
                f"{namespace_fix(namespace)}\nif namespace {namespace} exists, bind this identity to the Role there:"
                f" {DOC}",
            ),
            *(not_checked(name, f"namespace {namespace} failed (above)") for name in dependent),
        ]
    checks = [_namespace(namespace, exc)]
    admitted = exc is None
    because = f"no pod is admitted in namespace {namespace} (above)"
    checks.append(
        _pod_security(kube, settings, profile) if admitted else not_checked("PodSecurity restricted", because)
    )
    checks.append(_network_policy(kube, namespace, settings))
    for (runtime, klass), name in zip(sorted(settings.runtime_classes.items()), runtime_names, strict=True):
        checks.append(
            _runtime_class(kube, settings, profile, runtime, klass) if admitted else not_checked(name, because)
        )
    checks.append(_permissions(kube, namespace))
    return checks


def _granted(kube: KubeClient, namespace: str) -> list[tuple[str, str, str, str]]:
    """What of NEEDED this identity may do in ``namespace`` (nothing, as far as is known, when it may not ask)."""
    try:
        return [need for need in NEEDED if kube.can_i(namespace, *need)]
    except KubeError:
        return []


def _namespace(namespace: str, exc: KubeError | None) -> PreflightCheck:
    name = f"namespace {namespace}"
    if exc is None:
        return PreflightCheck(name, True, "exists: a sandbox pod is admitted there (dry run)")
    if _may_not_create_pods(exc):  # it has other rights there (cluster_checks): its Role lacks this one
        return failed(
            name,
            "DOCTOR.PERMISSIONS",
            f"this identity may not create pods there (it has other rights there): {exc.message}",
            permissions_fix(namespace, [("create", "pods", "", "")]),
        )
    return failed(name, "DOCTOR.NAMESPACE", f"a sandbox pod is refused there (dry run): {exc.message}", READ_MESSAGE)


def _pod_security(kube: KubeClient, settings: KubernetesSettings, profile: ResolvedProfile | None) -> PreflightCheck:
    name = "PodSecurity restricted"
    exc = refusal(kube, settings, profile, _weaken)
    if exc is None:
        return failed(
            name,
            "DOCTOR.POD_SECURITY",
            f"a pod that lets its process gain privileges was admitted in {settings.namespace} (dry run): the"
            " namespace does not enforce Pod Security restricted",
            pod_security_command(settings.namespace),
        )
    if exc.kind == "forbidden" and "podsecurity" in exc.message.lower().replace(" ", "").replace("-", ""):
        return PreflightCheck(name, True, "a pod outside restricted is refused by the API server (dry run)")
    return failed(name, "DOCTOR.POD_SECURITY", f"the dry run failed: {exc.message}", READ_MESSAGE)


def _network_policy(kube: KubeClient, namespace: str, settings: KubernetesSettings) -> PreflightCheck:
    name = "default-deny NetworkPolicy"
    try:
        policies = kube.list_network_policies(namespace)
    except KubeError as exc:
        if exc.kind == "forbidden":
            fix = permissions_fix(namespace, [("list", "networkpolicies", "", "networking.k8s.io")])
            return failed(name, "DOCTOR.PERMISSIONS", exc.message, fix)
        return failed(name, "DOCTOR.NETWORK_POLICY", f"cannot list them: {exc.message}", READ_MESSAGE)
    found = [p.get("metadata", {}).get("name") for p in policies if denies_all(p)]
    if found:
        return PreflightCheck(name, True, f"{', '.join(map(str, found))} (ingress and egress, every pod)")
    if not settings.require_network_policy:
        return PreflightCheck(name, True, f"none in {namespace} (not required by backend.kubernetes)")
    return failed(
        name,
        "DOCTOR.NETWORK_POLICY",
        f"none in {namespace}: every launch is refused (sandbox pods would have network)",
        network_policy_command(namespace),
    )


def _runtime_class(
    kube: KubeClient, settings: KubernetesSettings, profile: ResolvedProfile | None, runtime: str, klass: str
) -> PreflightCheck:
    name = f"RuntimeClass {klass} (runtime {runtime})"
    exc = refusal(kube, settings, profile, runtime_class_use(klass))
    if exc is None:
        return PreflightCheck(name, True, "a pod using it is admitted (dry run)")
    if "runtimeclass" in exc.message.lower() and "not found" in exc.message:
        return failed(
            name,
            "DOCTOR.RUNTIME",
            f"does not exist (a pod using it is refused: {exc.message})",
            runtime_class_fix(runtime, klass),
        )
    return failed(name, "DOCTOR.RUNTIME", f"a pod using it is refused: {exc.message}", READ_MESSAGE)


def _permissions(kube: KubeClient, namespace: str) -> PreflightCheck:
    missing = []
    try:
        for verb, resource, sub, group in NEEDED:
            if not kube.can_i(namespace, verb, resource, sub, group):
                missing.append((verb, resource, sub, group))
    except KubeError as exc:
        return failed("permissions", "DOCTOR.PERMISSIONS", f"access reviews failed: {exc.message}", READ_MESSAGE)
    if missing:
        names = ", ".join(f"{verb} {resource}{'/' + sub if sub else ''}" for verb, resource, sub, _ in missing)
        return failed(
            "permissions", "DOCTOR.PERMISSIONS", f"missing in {namespace}: {names}", permissions_fix(namespace, missing)
        )
    return PreflightCheck("permissions", True, f"all {len(NEEDED)} the backend needs in {namespace}")
