"""The cluster's own objects as data, and how they are applied: server-side apply through the official client,
as the test cluster's field manager."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from scripts.testcluster import configs, objects
from scripts.testcluster.settings import (
    GVISOR_PROBE_NAMESPACE,
    RUNTIME_CLASS,
    RUNTIME_HANDLER,
    SANDBOX_IMAGES,
    Settings,
)


def test_the_kubelet_api_binding() -> None:
    binding = objects.kubelet_api_binding()
    assert binding["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}
    ]


def test_the_runtime_class_names_containerds_gvisor_runtime(settings: Settings) -> None:
    rc = objects.runtime_class()
    assert rc == {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
    }
    runtimes = configs.containerd_config(settings).data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    assert rc["handler"] == RUNTIME_HANDLER and RUNTIME_HANDLER in runtimes
    assert rc["metadata"]["name"] == RUNTIME_CLASS


def test_the_gvisor_probe_is_a_restricted_pod_under_gvisor() -> None:
    namespace = objects.probe_namespace()
    assert namespace["metadata"] == {
        "name": GVISOR_PROBE_NAMESPACE,
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
    }
    pod = objects.probe_pod()
    assert pod["metadata"]["namespace"] == GVISOR_PROBE_NAMESPACE
    spec = pod["spec"]
    assert spec["runtimeClassName"] == RUNTIME_CLASS
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] in SANDBOX_IMAGES
    assert container["imagePullPolicy"] == "Never"  # never a pull
    assert container["command"] == ["uname", "-r"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


class Recorder:
    """Stands for a typed API class of the client: records every call."""

    calls: ClassVar[list[tuple[str, tuple[Any, ...], dict[str, Any]]]] = []

    def __init__(self, api: Any) -> None:
        self.api = api

    def __getattr__(self, method: str) -> Any:
        return lambda *args, **kwargs: Recorder.calls.append((method, args, kwargs))


@pytest.mark.parametrize(
    ("manifest", "api_class", "method", "args"),
    [
        (
            objects.kubelet_api_binding(),
            "RbacAuthorizationV1Api",
            "patch_cluster_role_binding",
            ("sandbox-orchestrator:apiserver-kubelet-client",),
        ),
        (objects.runtime_class(), "NodeV1Api", "patch_runtime_class", ("gvisor",)),
        (objects.probe_namespace(), "CoreV1Api", "patch_namespace", (GVISOR_PROBE_NAMESPACE,)),
        (objects.probe_pod(), "CoreV1Api", "patch_namespaced_pod", ("probe", GVISOR_PROBE_NAMESPACE)),
    ],
)
def test_apply_is_a_server_side_apply(
    monkeypatch: pytest.MonkeyPatch, manifest: dict[str, Any], api_class: str, method: str, args: tuple[str, ...]
) -> None:
    from kubernetes import client

    monkeypatch.setattr(client, api_class, Recorder)
    Recorder.calls = []
    objects.apply("the api client", manifest)
    assert Recorder.calls == [
        (
            method,
            (*args, manifest),
            {
                "field_manager": "sandbox-orchestrator-test-cluster",
                "force": True,
                "_content_type": "application/apply-patch+yaml",
            },
        )
    ]


def test_apply_refuses_a_kind_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="no apply for Secret"):
        objects.apply(None, {"kind": "Secret", "metadata": {"name": "x"}})


def test_the_client_talks_to_the_cluster_directly(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    with objects.api_client(settings) as api:
        config = api.configuration
        assert config.host == "https://127.0.0.1:16443"
        assert not config.proxy  # never a proxy from the environment
        assert config.ssl_ca_cert == str(settings.ca_cert)
        assert (config.cert_file, config.key_file) == (str(settings.cert("admin")), str(settings.key("admin")))
