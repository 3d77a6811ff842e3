"""A thin, typed layer over the official client's connection: raw JSON in and out, streams closable.

The client's generated models are skipped on purpose: the backend reads a handful of fields, a watch or
a log is a stream the reader must be able to close from another thread, and what is sent should be
exactly the reviewed manifest (``manifest.py``). The client still supplies what matters to get right:
kubeconfig and in-cluster loading, TLS, and the rotation of the ServiceAccount's token. Every failure is a
:class:`KubeError` with a kind the backend maps onto the project's error codes. Blocking: call off the loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from orchestrator.backends.kubernetes.channels import ChannelError, Channels, open_channels

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
ErrorKind = Literal[
    "unreachable", "unauthorized", "forbidden", "not_found", "conflict", "invalid", "gone", "bad_request", "server"
]
_KINDS: Mapping[int, ErrorKind] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    410: "gone",
    422: "invalid",
}
#: a short call's budget: (connect, read) seconds
CALL_TIMEOUT = (5.0, 30.0)


class KubeError(Exception):
    def __init__(self, kind: ErrorKind, operation: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{operation}: {message}")
        self.kind = kind
        self.operation = operation
        self.message = message
        self.status = status

    def details(self) -> dict[str, object]:
        return {"operation": self.operation, "status": self.status, "api_message": self.message[:2000]}


def _status_error(operation: str, response: urllib3.BaseHTTPResponse) -> KubeError:
    body = response.data or b""
    message = body.decode("utf-8", "replace")[:4000]
    with contextlib.suppress(ValueError, AttributeError):
        message = str(json.loads(body).get("message") or message)
    kind = _KINDS.get(response.status, "server")
    return KubeError(kind, operation, message, response.status)


def _decode(operation: str, response: urllib3.BaseHTTPResponse) -> JsonObject:
    try:
        value = json.loads(response.data)
    except ValueError as exc:
        raise KubeError("server", operation, f"the API server answered with invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise KubeError("server", operation, "the API server answered with something other than an object")
    return value


@dataclass(frozen=True, slots=True)
class WatchItem:
    type: str  # ADDED / MODIFIED / DELETED / BOOKMARK / ERROR
    object: JsonObject


class _Stream:
    """A response read on one thread and closed from another (the socket is shut down: the read returns)."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        shutdown = getattr(self._response, "shutdown", None)
        with contextlib.suppress(Exception):
            if shutdown is not None:
                shutdown()
        with contextlib.suppress(Exception):
            self._response.release_conn()


class WatchStream(_Stream):
    """The watch's events, one JSON line each."""

    def __init__(self, response: urllib3.BaseHTTPResponse, operation: str) -> None:
        super().__init__(response)
        self._operation = operation

    def __iter__(self) -> Iterator[WatchItem]:
        buffer = b""
        try:
            for chunk in self._response.stream(64 * 1024, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield self._item(line)
        except Exception as exc:
            if self._closed:
                return
            raise KubeError("unreachable", self._operation, f"the watch broke off: {exc}") from exc

    def _item(self, line: bytes) -> WatchItem:
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise KubeError("server", self._operation, f"a watch event was not JSON: {exc}") from exc
        kind, obj = value.get("type"), value.get("object")
        if not isinstance(kind, str) or not isinstance(obj, dict):
            raise KubeError("server", self._operation, "a watch event without a type or an object")
        return WatchItem(kind, obj)


class KubeClient:
    """One API server, as configured (kubeconfig, or in-cluster)."""

    def __init__(self, api: k8s_client.ApiClient, server: str) -> None:
        self._api = api
        self.server = server

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None) -> KubeClient:
        try:
            if kubeconfig is None and _in_cluster():
                configuration = k8s_client.Configuration()
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                api = k8s_client.ApiClient(configuration)
            else:
                api = k8s_config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeError("unreachable", "connect", f"no usable Kubernetes configuration: {exc}") from exc
        api.user_agent = "sandbox-orchestrator"
        return cls(api, str(api.configuration.host))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._api.close()  # type: ignore[no-untyped-call]

    # -- plumbing -------------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: tuple[float, float | None] = CALL_TIMEOUT,
    ) -> urllib3.BaseHTTPResponse:
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            verb, url, headers, payload, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            answer = self._api.call_api(verb, url, header_params=headers, body=payload, _request_timeout=timeout)
            response: urllib3.BaseHTTPResponse = answer.response
            return response
        except KubeError:
            raise
        except Exception as exc:  # urllib3 / ssl / socket: the API server did not answer
            raise KubeError("unreachable", operation, f"{type(exc).__name__}: {exc}") from exc

    def _json(self, method: str, path: str, operation: str, **kwargs: Any) -> JsonObject:
        response = self._send(method, path, operation, **kwargs)
        try:
            if response.status >= 300:
                raise _status_error(operation, response)
            return _decode(operation, response)
        finally:
            response.release_conn()

    # -- pods -----------------------------------------------------------------------------------------

    def create_pod(self, namespace: str, pod: JsonObject, *, dry_run: bool = False) -> JsonObject:
        """``dry_run``: admitted (or refused) as for real, but not kept."""
        query: dict[str, str | int | bool] = {"dryRun": "All"} if dry_run else {}
        return self._json("POST", f"/api/v1/namespaces/{namespace}/pods", "create pod", body=pod, query=query)

    def get_pod(self, namespace: str, name: str) -> JsonObject:
        return self._json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", "get pod")

    def patch_pod(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        return self._json(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            "patch pod",
            body=patch,
            content_type="application/strategic-merge-patch+json",
        )

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int = 0, uid: str | None = None) -> None:
        body: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds}
        if uid is not None:
            body["preconditions"] = {"uid": uid}  # never another pod that took the name since
        self._json("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", "delete pod", body=body)

    def delete_pod_quietly(self, namespace: str, name: str, uid: str) -> None:
        """Delete an abandoned pod (``uid``: never another that took its name); a failure is logged (the
        orphan collector removes what is left)."""
        try:
            self.delete_pod(namespace, name, grace_seconds=0, uid=uid)
        except KubeError as exc:
            if exc.kind != "not_found":
                log.warning("could not delete abandoned pod %s: %s", name, exc)

    def list_pods(self, namespace: str, selector: str) -> tuple[list[JsonObject], str]:
        listed = self._json(
            "GET", f"/api/v1/namespaces/{namespace}/pods", "list pods", query={"labelSelector": selector}
        )
        items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
        return items, str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def watch_pods(self, namespace: str, selector: str, resource_version: str, timeout_s: int) -> WatchStream:
        operation = "watch pods"
        response = self._send(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            operation,
            query={
                "labelSelector": selector,
                "watch": True,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": timeout_s,
            },
            timeout=(CALL_TIMEOUT[0], timeout_s + 30.0),
        )
        if response.status >= 300:
            try:
                raise _status_error(operation, response)
            finally:
                response.release_conn()
        return WatchStream(response, operation)

    def open_exec(
        self, namespace: str, pod: str, container: str, command: list[str], *, stdin: bool = False, tty: bool = False
    ) -> Channels:
        """Start ``command`` in a running container (the exec subresource, a websocket through the API
        server) and hand over its stdio; the stream ends once the command ended and its output was sent.
        ``tty``: the command's stdio is a terminal the kubelet makes (its output all on stdout)."""
        try:
            return open_channels(
                self._api.configuration,
                "exec",
                namespace,
                pod,
                container=container,
                command=command,
                stdin=stdin,
                stdout=True,
                stderr=not tty,
                tty=tty,
            )
        except ChannelError as exc:
            raise _channel_error("exec", exc) from exc

    def exec_in(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: list[str],
        *,
        stdin: BinaryIO | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        timeout_s: float = 600.0,
    ) -> tuple[int | None, bytes]:
        """Run ``command`` in a running container (the exec subresource, a websocket through the API
        server): ``stdin`` sent whole, stdout to ``on_stdout`` as it comes (it may raise to stop), the
        first 64 KiB of stderr kept. Returns (exit code, stderr); the code is None if none was reported."""
        operation = "exec"
        channels = self.open_exec(namespace, pod, container, command, stdin=stdin is not None)
        stderr = bytearray()

        def keep_stderr(data: bytes) -> None:
            stderr.extend(data[: max(0, 65536 - len(stderr))])

        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            channels.close()

        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        timer.start()
        try:
            if stdin is not None:
                while chunk := stdin.read(64 * 1024):
                    channels.write_stdin(chunk)
            channels.pump(on_stdout or (lambda _data: None), keep_stderr)
        except ChannelError as exc:
            raise _channel_error(operation, exc) from exc
        finally:
            timer.cancel()
            channels.close()
        if timed_out.is_set():
            raise KubeError("server", operation, f"the command did not end within {timeout_s:g}s")
        return exit_code(channels.status), bytes(stderr)

    # -- around pods ----------------------------------------------------------------------------------

    def list_events(self, namespace: str, pod: str) -> list[JsonObject]:
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        listed = self._json(
            "GET", f"/api/v1/namespaces/{namespace}/events", "list events", query={"fieldSelector": selector}
        )
        return [item for item in listed.get("items") or [] if isinstance(item, dict)]

    def list_network_policies(self, namespace: str) -> list[JsonObject]:
        listed = self._json(
            "GET", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", "list network policies"
        )
        return [item for item in listed.get("items") or [] if isinstance(item, dict)]

    def get_runtime_class(self, name: str) -> JsonObject:
        return self._json("GET", f"/apis/node.k8s.io/v1/runtimeclasses/{quote(name, safe='')}", "get runtime class")

    def version(self) -> JsonObject:
        return self._json("GET", "/version", "version")

    def can_i(self, namespace: str, verb: str, resource: str, subresource: str = "", group: str = "") -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                }
            },
        }
        answer = self._json(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "access review", body=review
        )
        return bool((answer.get("status") or {}).get("allowed"))

    # -- leases (controller liveness) -------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> JsonObject:
        return self._json("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "get lease")

    def create_lease(self, namespace: str, lease: JsonObject) -> JsonObject:
        return self._json(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", "create lease", body=lease
        )

    def replace_lease(self, namespace: str, name: str, lease: JsonObject) -> JsonObject:
        return self._json(
            "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "renew lease", body=lease
        )

    def delete_lease(self, namespace: str, name: str) -> None:
        self._json("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "delete lease")

    def list_leases(self, namespace: str, selector: str) -> list[JsonObject]:
        listed = self._json(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            "list leases",
            query={"labelSelector": selector},
        )
        return [item for item in listed.get("items") or [] if isinstance(item, dict)]


def _channel_error(operation: str, exc: ChannelError) -> KubeError:
    kind = _KINDS.get(exc.status, "server") if exc.status is not None else "unreachable"
    return KubeError(kind, operation, str(exc), exc.status)


def exit_code(status: JsonObject | None) -> int | None:
    """The exit code an exec's final Status reports (Success: 0; NonZeroExitCode: its ExitCode cause)."""
    if status is None:
        return None
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(str(cause.get("message")))
    return None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")
