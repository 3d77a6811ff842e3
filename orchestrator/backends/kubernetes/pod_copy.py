"""Copy mode's two transfers through the API server (see ``workspace_copy`` for what is packed and how it is
applied): the controller's workspace into a pod's init container before its command starts, and the pod's
workspace back once the command ended on its own. Blocking: run on the backend's threads. A failure is the
pipeline's kind of error, never the client's."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends.kubernetes import workspace_copy
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError
from orchestrator.backends.kubernetes.manifest import COPY_IN_CONTAINER, COPY_OUT_CONTAINER
from orchestrator.domain.errors import SandboxStartFailed, SandboxUnavailable, SideEffectsIncomplete

#: what is kept of tar's complaint in an error
STDERR_KEPT = 2000


class PodCopy:
    """One pod's transfers, at most ``max_bytes`` each way (``backend.kubernetes.workspace.copy_max_bytes``)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, max_bytes: int) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._max_bytes = max_bytes

    def copy_in(self, workspace: Path, container_path: str) -> None:
        """``workspace`` into the pod's init container at ``container_path`` (it runs: the caller waited)."""
        try:
            with workspace_copy.pack(workspace, self._max_bytes) as archive:
                size = archive.seek(0, 2)
                archive.seek(0)
                command = workspace_copy.copy_in_command(container_path, size)
                code, stderr = self._kube.exec_in(
                    self._namespace, self._name, COPY_IN_CONTAINER, command, stdin=archive
                )
            if code != 0:
                raise workspace_copy.CopyError(f"tar in the pod exited {code}: {_tail(stderr)}")
        except workspace_copy.CopyError as exc:
            raise SandboxStartFailed(f"could not copy the workspace into pod {self._name}: {exc}") from exc
        except (KubeError, OSError) as exc:
            message = exc.message if isinstance(exc, KubeError) else str(exc)
            raise SandboxUnavailable(f"could not copy the workspace into pod {self._name}: {message}") from exc

    def copy_out(self, workspace: Path, container_path: str) -> workspace_copy.Applied:
        """The pod's ``container_path`` back onto ``workspace`` (what the workload left is hostile: see
        ``workspace_copy.apply``)."""
        spool = workspace_copy.BoundedSpool(self._max_bytes)
        details = {"sandbox": self._name}
        try:
            command = workspace_copy.copy_out_command(container_path)
            code, stderr = self._kube.exec_in(
                self._namespace, self._name, COPY_OUT_CONTAINER, command, on_stdout=spool.feed
            )
            if code != 0:
                raise workspace_copy.CopyError(f"tar in the pod exited {code}: {_tail(stderr)}")
            return workspace_copy.apply(spool.rewound(), workspace)
        except workspace_copy.CopyError as exc:  # what the workload left cannot be taken back as it is
            raise SideEffectsIncomplete(
                f"the workspace of pod {self._name} could not be copied back: {exc}", details=details
            ) from exc
        except (KubeError, OSError) as exc:
            message = exc.message if isinstance(exc, KubeError) else str(exc)
            raise SandboxUnavailable(
                f"the workspace of pod {self._name} could not be copied back: {message}", details=details
            ) from exc
        finally:
            spool.close()


def _tail(stderr: bytes) -> str:
    return stderr.decode("utf-8", "replace")[-STDERR_KEPT:]
