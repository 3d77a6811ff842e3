"""The only module that touches the docker SDK: blocking, typed wrappers over ``docker.APIClient``.

Everything the SDK returns is untyped JSON; it leaves this module as ``JsonObject`` (read through the
typed accessors below) or as plain ``str``/``int``. Every SDK, requests or socket exception becomes an
:class:`EngineError` carrying the engine's own payload (status code, explanation) and a coarse
``kind`` the backend maps to the orchestrator's error codes. ``docker`` is imported lazily, when the
first client is built, so importing the backend costs nothing at CLI start-up.

All methods block: the backend calls them off the event loop.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal

JsonObject = dict[str, object]

ErrorKind = Literal["unreachable", "not_found", "image_not_found", "conflict", "bad_request", "server"]

#: Connections kept per client: an execution holds up to three at once (attach, wait, events).
MAX_POOL_SIZE = 128
#: Seconds for ordinary requests (create, start, inspect, remove ...); waits and streams have none.
REQUEST_TIMEOUT_S = 60


class EngineError(Exception):
    """A failed engine call, with the engine's payload."""

    def __init__(
        self,
        kind: ErrorKind,
        operation: str,
        reason: str,
        *,
        status_code: int | None = None,
        explanation: str | None = None,
    ) -> None:
        super().__init__(f"{operation}: {reason}")
        self.kind: ErrorKind = kind
        self.operation = operation
        self.reason = reason
        self.status_code = status_code
        self.explanation = explanation

    def details(self) -> dict[str, object]:
        out: dict[str, object] = {"operation": self.operation, "engine_error": self.kind}
        if self.status_code is not None:
            out["engine_status"] = self.status_code
        out["engine_explanation"] = self.explanation if self.explanation is not None else self.reason
        return out


# -- typed access to untyped JSON --------------------------------------------------------------------


def jobj(value: object, key: str) -> JsonObject:
    item = value.get(key) if isinstance(value, dict) else None
    return {str(k): v for k, v in item.items()} if isinstance(item, dict) else {}


def jlist(value: object, key: str) -> list[object]:
    item = value.get(key) if isinstance(value, dict) else None
    return list(item) if isinstance(item, list) else []


def jstr(value: object, key: str) -> str | None:
    item = value.get(key) if isinstance(value, dict) else None
    return item if isinstance(item, str) else None


def jint(value: object, key: str) -> int | None:
    item = value.get(key) if isinstance(value, dict) else None
    return item if isinstance(item, int) and not isinstance(item, bool) else None


def jbool(value: object, key: str) -> bool | None:
    item = value.get(key) if isinstance(value, dict) else None
    return item if isinstance(item, bool) else None


def str_map(value: object) -> dict[str, str]:
    """A JSON object of strings (labels, event attributes); other values are dropped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _as_object(value: Any) -> JsonObject:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _as_object_list(value: Any) -> list[JsonObject]:
    return [_as_object(v) for v in value] if isinstance(value, list) else []


# -- exception translation ---------------------------------------------------------------------------


def _translate(operation: str, exc: BaseException) -> EngineError:
    """Map any SDK / requests / socket exception to an EngineError (never raises)."""
    import docker.errors  # type: ignore[import-untyped]  # noqa: PLC0415 - loaded with the client
    import requests  # noqa: PLC0415

    if isinstance(exc, docker.errors.APIError):
        status = exc.status_code if isinstance(exc.status_code, int) else None
        explanation = exc.explanation if isinstance(exc.explanation, str) else str(exc)
        kind: ErrorKind
        if isinstance(exc, docker.errors.ImageNotFound) or (status == 404 and "no such image" in explanation.lower()):
            kind = "image_not_found"
        elif status == 404:
            kind = "not_found"
        elif status == 409:
            kind = "conflict"
        elif status is not None and 400 <= status < 500:
            kind = "bad_request"
        else:
            kind = "server"
        return EngineError(kind, operation, explanation, status_code=status, explanation=explanation)
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, OSError)):
        return EngineError("unreachable", operation, _short(exc))
    if isinstance(exc, docker.errors.DockerException):
        # raised by the client itself, e.g. "Error while fetching server API version" (engine down)
        return EngineError("unreachable", operation, _short(exc))
    if isinstance(exc, requests.exceptions.RequestException):
        return EngineError("unreachable", operation, _short(exc))
    return EngineError("server", operation, f"{type(exc).__name__}: {_short(exc)}")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


@contextlib.contextmanager
def _engine_call(operation: str) -> Iterator[None]:
    try:
        yield
    except EngineError:
        raise
    except Exception as exc:
        raise _translate(operation, exc) from exc


# -- the attached stdio connection ---------------------------------------------------------------------


class AttachStream:
    """The hijacked ``/attach`` connection of one container: read the multiplexed output, write stdin.

    One reader thread at a time. :meth:`abort` may be called from any thread: it shuts the socket
    down, which wakes a blocked reader (the reader then sees end of stream and releases the
    connection itself, so no thread ever blocks on the buffered reader's lock).
    """

    def __init__(self, response: Any, reader: Any, sock: socket.socket) -> None:
        self._response = response
        self._reader = reader  # the BufferedReader http.client parsed the 101 response from
        self._sock = sock
        self._lock = threading.Lock()
        self._reading = False
        self._aborted = False
        self._abort_requested = False
        self._released = False

    @property
    def aborted_by_caller(self) -> bool:
        """True when :meth:`abort` stopped the stream (not the engine ending it)."""
        return self._abort_requested

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at end of stream or after :meth:`abort`."""
        with self._lock:
            if self._aborted or self._released:
                return b""
            self._reading = True
        try:
            data = self._reader.read1(size)
            chunk = bytes(data) if data else b""
        except (OSError, ValueError) as exc:
            if self._aborted:
                chunk = b""
            else:
                raise EngineError("unreachable", "attach", f"output stream broke: {_short(exc)}") from exc
        finally:
            with self._lock:
                self._reading = False
                release = self._aborted
            if release:
                self._release()
        return chunk

    def write_stdin(self, data: bytes) -> None:
        """Send ``data`` to the container's stdin, then close our sending side (stdin EOF).

        A container that exits without reading everything closes the connection: that is not an error.
        """
        with contextlib.suppress(OSError):
            if data:
                self._sock.sendall(data)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    def send(self, data: bytes) -> None:
        """Send ``data`` to the container's stdin (a session); raises OSError once the connection is gone."""
        self._sock.sendall(data)

    def end_input(self) -> None:
        """Close our sending side: the container's stdin sees EOF."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    def abort(self) -> None:
        """Stop the stream now (cancellation, teardown): thread-safe and idempotent."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
            self._abort_requested = True
            reading = self._reading
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if not reading:
            self._release()

    def close(self) -> None:
        """Release the connection after the stream ended (called by the reader)."""
        with self._lock:
            self._aborted = True
        self._release()

    def _release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        with contextlib.suppress(Exception):
            self._sock.close()
        with contextlib.suppress(Exception):
            self._response.close()


# -- the event stream ----------------------------------------------------------------------------------


class EventStream:
    """Decoded engine events (dicts) until closed; :meth:`close` is thread-safe and wakes the reader."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def __iter__(self) -> Iterator[JsonObject]:
        while True:
            try:
                item = next(self._stream)
            except StopIteration:
                return
            except Exception as exc:
                if self._closed:
                    return
                raise _translate("events", exc) from exc
            if isinstance(item, dict):
                yield _as_object(item)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(Exception):
            self._stream.close()  # shuts the socket down: a blocked read returns


# -- the client ----------------------------------------------------------------------------------------


class EngineClient:
    """A connected ``docker.APIClient`` (API version negotiated with the engine)."""

    def __init__(self, api: Any, base_url: str) -> None:
        self._api = api
        self.base_url = base_url

    @classmethod
    def connect(cls, base_url: str, *, tls_from_env: bool = False) -> EngineClient:
        """Build a client; fails with ``EngineError("unreachable")`` when the engine does not answer."""
        with _engine_call("connect"):
            import docker  # noqa: PLC0415 - heavy (~100 ms): only when a backend is really used

            kwargs: dict[str, Any] = {}
            if tls_from_env:
                tls = docker.utils.kwargs_from_env().get("tls")
                if tls:
                    kwargs["tls"] = tls
            api = docker.APIClient(
                base_url=base_url,
                version="auto",  # the project's engine (20.10) speaks API 1.41; negotiate, never assume
                timeout=REQUEST_TIMEOUT_S,
                max_pool_size=MAX_POOL_SIZE,
                **kwargs,
            )
        return cls(api, base_url)

    @property
    def api_version(self) -> str:
        version = getattr(self._api, "api_version", "")
        return version if isinstance(version, str) else ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._api.close()

    # engine facts
    def version(self) -> JsonObject:
        with _engine_call("version"):
            return _as_object(self._api.version())

    def info(self) -> JsonObject:
        with _engine_call("info"):
            return _as_object(self._api.info())

    def images(self) -> list[JsonObject]:
        with _engine_call("images"):
            return _as_object_list(self._api.images())

    # one container
    def create(self, config: Mapping[str, object], name: str) -> tuple[str, list[str]]:
        """Create from a raw API config; returns (id, engine warnings). Never pulls an image."""
        with _engine_call("create"):
            result = _as_object(self._api.create_container_from_config(dict(config), name=name))
        container_id = jstr(result, "Id")
        if not container_id:
            raise EngineError("server", "create", "the engine returned no container id")
        warnings = [w for w in jlist(result, "Warnings") if isinstance(w, str)]
        return container_id, warnings

    def attach(self, container_id: str, *, stdin: bool) -> AttachStream:
        """Attach to stdio before start: the engine subscribes the output pipes before it answers
        101, so nothing the container writes after that is lost."""
        with _engine_call("attach"):
            api = self._api
            params = {"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1, "logs": 0}
            response = api._post(  # the SDK's attach_socket, keeping the buffered reader
                api._url("/containers/{0}/attach", container_id),
                params=params,
                headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                stream=True,
            )
            api._raise_for_status(response)
            reader = response.raw._fp.fp  # http.client's BufferedReader: may hold early bytes
            raw = reader.raw
            sock = getattr(raw, "_sock", None) or getattr(raw, "sock", None)
            if not isinstance(sock, socket.socket):
                response.close()
                raise EngineError("server", "attach", "attach is only supported over unix or tcp sockets")
            sock.settimeout(None)  # output may pause for longer than the request timeout
        return AttachStream(response, reader, sock)

    def start(self, container_id: str) -> None:
        with _engine_call("start"):
            self._api.start(container_id)

    def resize(self, container_id: str, rows: int, cols: int) -> None:
        """The container's terminal window size (a container created with Tty)."""
        with _engine_call("resize"):
            self._api.resize(container_id, height=rows, width=cols)

    def wait(self, container_id: str) -> tuple[int, str | None]:
        """Block until the container is not running; (exit code, engine error message)."""
        with _engine_call("wait"):
            result = _as_object(self._api.wait(container_id, timeout=None))
        code = jint(result, "StatusCode")
        if code is None:
            raise EngineError("server", "wait", "the engine returned no exit status")
        error = jstr(jobj(result, "Error"), "Message") or None
        return code, error

    def kill(self, container_id: str, signal: str) -> None:
        with _engine_call("kill"):
            self._api.kill(container_id, signal=signal)

    def inspect(self, container_id: str) -> JsonObject:
        with _engine_call("inspect"):
            return _as_object(self._api.inspect_container(container_id))

    def remove(self, container_id: str) -> None:
        with _engine_call("remove"):
            self._api.remove_container(container_id, force=True, v=True)

    def containers(self, labels: list[str]) -> list[JsonObject]:
        with _engine_call("list"):
            return _as_object_list(self._api.containers(all=True, filters={"label": labels}))

    def events(self, filters: Mapping[str, list[str]], since: str | None) -> EventStream:
        """Subscribe to the event stream (returns once the engine answered)."""
        with _engine_call("events"):
            stream = self._api.events(since=since, filters=dict(filters), decode=True)
        return EventStream(stream)
