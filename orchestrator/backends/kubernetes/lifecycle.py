"""A pod's lifecycle as the API server reports it, mapped onto the same records as Docker's. Pure.

The watch delivers successive snapshots of a pod; :class:`PodLifecycle` turns them into lifecycle events,
each once, stamped with the API server's own times (never the controller's clock):

=========  ===========================================================================================
create     first sight of the pod: ``metadata.creationTimestamp``
schedule   ``PodScheduled`` condition true: its ``lastTransitionTime`` (the node in ``attributes``)
start      the container's ``state.running.startedAt`` (or ``terminated.startedAt``)
oom        the container terminated with reason ``OOMKilled``: its ``finishedAt``
kill       the pod was stopped from outside: deleted while running (``deletionTimestamp``) or past its
           ``activeDeadlineSeconds`` (``status.reason: DeadlineExceeded``)
die        the container terminated: ``finishedAt``, with its exit code and reason
destroy    the pod object is gone (watch ``DELETED``): its ``deletionTimestamp``
=========  ===========================================================================================
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.backends.base import (
    LABEL_DEADLINE,
    LABEL_EXECUTION_ID,
    ExitState,
    LifecycleEvent,
    LifecycleKind,
    ManagedSandbox,
)
from orchestrator.backends.kubernetes.manifest import ANNOTATION_DEADLINE, ANNOTATION_OWNER
from orchestrator.domain.errors import OrchestratorError, SandboxStartFailed, SandboxTimeout, SandboxUnavailable

JsonObject = dict[str, Any]
CONTAINER = "sandbox"

#: waiting reasons after which the container will never start on its own
FATAL_WAITING: dict[str, str] = {
    "ErrImageNeverPull": "unavailable",
    "ErrImagePull": "unavailable",
    "ImagePullBackOff": "unavailable",
    "InvalidImageName": "unavailable",
    "CreateContainerConfigError": "failed",
    "CreateContainerError": "failed",
    "RunContainerError": "failed",
    "StartError": "failed",
}


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _obj(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def container_status(pod: JsonObject) -> JsonObject:
    for status in _obj(pod.get("status")).get("containerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == CONTAINER:
            return status
    return {}


def container_running(pod: JsonObject, name: str) -> bool:
    """Whether container ``name`` (a sidecar) runs now."""
    for status in _obj(pod.get("status")).get("containerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == name:
            return isinstance(_obj(status.get("state")).get("running"), dict)
    return False


def init_state(pod: JsonObject, name: str) -> JsonObject:
    """The state of init container ``name`` ({} until the kubelet reports it)."""
    for status in _obj(pod.get("status")).get("initContainerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == name:
            return _obj(status.get("state"))
    return {}


def terminated(pod: JsonObject) -> JsonObject | None:
    state = _obj(container_status(pod).get("state")).get("terminated")
    return state if isinstance(state, dict) else None


def running(pod: JsonObject) -> JsonObject | None:
    state = _obj(container_status(pod).get("state")).get("running")
    return state if isinstance(state, dict) else None


def waiting(pod: JsonObject) -> JsonObject | None:
    state = _obj(container_status(pod).get("state")).get("waiting")
    return state if isinstance(state, dict) else None


def stuck(pod: JsonObject) -> JsonObject | None:
    """Why the pod does not get to run the command: a container (init containers first) waiting for a
    reason after which it never will, else the command's own waiting state."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for status in _obj(pod.get("status")).get(key) or []:
            state = _obj(_obj(status).get("state")).get("waiting")
            if isinstance(state, dict) and state.get("reason") in FATAL_WAITING:
                return state
    return waiting(pod)


def condition(pod: JsonObject, kind: str) -> JsonObject | None:
    for item in _obj(pod.get("status")).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") == kind:
            return item
    return None


def pod_uid(pod: JsonObject) -> str:
    return str(_obj(pod.get("metadata")).get("uid") or "")


def pod_name(pod: JsonObject) -> str:
    return str(_obj(pod.get("metadata")).get("name") or "")


def execution_of(pod: JsonObject) -> str | None:
    value = _obj(_obj(pod.get("metadata")).get("labels")).get(LABEL_EXECUTION_ID)
    return value if isinstance(value, str) else None


def ip(pod: JsonObject | None) -> str | None:
    """The pod's IPv4 address once the network plugin gave it one."""
    found = _obj((pod or {}).get("status")).get("podIP")
    return found if isinstance(found, str) and found else None


def phase(pod: JsonObject) -> str:
    return str(_obj(pod.get("status")).get("phase") or "")


def exit_state(pod: JsonObject) -> ExitState:
    """The container's end as the kubelet reported it; ``exit_code`` None until it terminated."""
    ended = terminated(pod)
    status = container_status(pod)
    image_id = status.get("imageID") or None
    started = parse_time((ended or running(pod) or {}).get("startedAt"))
    if ended is None:
        stuck = waiting(pod)
        error = None
        if stuck is not None:
            error = f"{stuck.get('reason') or 'Waiting'}: {stuck.get('message') or ''}".strip()
        elif _obj(pod.get("status")).get("reason"):
            status_of_pod = _obj(pod.get("status"))
            error = f"{status_of_pod.get('reason')}: {status_of_pod.get('message') or ''}".strip()
        return ExitState(None, False, started, None, error=error, image_id=image_id)
    code = ended.get("exitCode")
    reason = str(ended.get("reason") or "")
    notes = []
    if reason not in ("", "Completed", "Error", "OOMKilled"):
        notes.append(f"{reason}: {ended.get('message') or ''}".strip())
    pod_status = _obj(pod.get("status"))
    if pod_status.get("reason") and pod_status.get("reason") != "DeadlineExceeded":  # e.g. Evicted, and why
        notes.append(f"{pod_status.get('reason')}: {pod_status.get('message') or ''}".strip())
    error = "; ".join(notes) or None
    return ExitState(
        exit_code=code if isinstance(code, int) else None,
        oom_killed=reason == "OOMKilled",
        started_at=started,
        finished_at=parse_time(ended.get("finishedAt")),
        error=error,
        image_id=image_id,
    )


def deadline_exceeded(pod: JsonObject) -> bool:
    return _obj(pod.get("status")).get("reason") == "DeadlineExceeded"


def deleting(pod: JsonObject) -> bool:
    """Someone asked the API server to delete the pod (its containers are being stopped)."""
    return bool(_obj(pod.get("metadata")).get("deletionTimestamp"))


def deleted_before_its_end(pod: JsonObject) -> bool:
    """Its deletion was asked for before its container ended (at the API server's second: the same second
    counts), so its end was the deletion's doing, not the command's. The deletion's time is its
    ``deletionTimestamp`` less the grace period the API server added to it."""
    meta = _obj(pod.get("metadata"))
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is None:
        return False
    grace = meta.get("deletionGracePeriodSeconds")
    asked = deleted - timedelta(seconds=grace if isinstance(grace, int) and grace > 0 else 0)
    ended = parse_time(_obj(terminated(pod)).get("finishedAt"))
    return ended is None or asked <= ended


def past_deadline(name: str, code: int) -> SandboxTimeout:
    """The kubelet stopped the pod at its activeDeadlineSeconds (the backstop) before the controller's own
    timer did: a timeout, never the exit the command chose after the SIGTERM."""
    return SandboxTimeout(
        f"pod {name} was stopped at its deadline by the kubelet (activeDeadlineSeconds); its command exited {code}",
        details={"sandbox": name, "exit_code": code},
    )


def no_exit_code(name: str, state: ExitState | None, forwarded: int | None) -> SandboxUnavailable:
    """A pod that ended without the kubelet's exit code (``forwarded``: the signal from outside its init saw)."""
    why = (state.error if state else None) or "deleted before the kubelet reported one"
    if forwarded:
        why = (
            f"its init forwarded signal {forwarded} from outside the sandbox (an eviction, a deletion by someone"
            " else, the node shutting down); deleted before the kubelet reported the end"
        )
    return SandboxUnavailable(f"pod {name} ended without an exit code ({why})", details={"sandbox": name})


class PodLifecycle:
    """One pod's lifecycle events, each emitted once, in lifecycle order."""

    def __init__(self) -> None:
        self._emitted: set[LifecycleKind] = set()
        self.last: JsonObject | None = None

    def done(self) -> bool:
        return "destroy" in self._emitted

    def update(self, pod: JsonObject, *, deleted: bool = False) -> list[LifecycleEvent]:
        self.last = pod
        events: list[LifecycleEvent] = []
        meta = _obj(pod.get("metadata"))
        uid = pod_uid(pod)
        execution_id = execution_of(pod)

        def emit(kind: LifecycleKind, when: datetime | None, **fields: Any) -> None:
            if kind in self._emitted or when is None:
                return
            self._emitted.add(kind)
            events.append(
                LifecycleEvent(kind=kind, sandbox_id=uid, execution_id=execution_id, engine_ts=when, **fields)
            )

        emit("create", parse_time(meta.get("creationTimestamp")))
        scheduled = condition(pod, "PodScheduled")
        if scheduled is not None and scheduled.get("status") == "True":
            node = str(_obj(pod.get("spec")).get("nodeName") or "")
            emit("schedule", parse_time(scheduled.get("lastTransitionTime")), attributes={"node": node})
        ended = terminated(pod)
        started = running(pod) or ended
        if started is not None:
            emit("start", parse_time(started.get("startedAt")))
        deletion = parse_time(meta.get("deletionTimestamp"))
        finished = parse_time((ended or {}).get("finishedAt"))
        if deadline_exceeded(pod):  # past activeDeadlineSeconds (ours cut it to stop the pod): the kubelet kills
            emit("kill", _deadline_time(pod) or finished, signal="SIGKILL", attributes={"reason": "DeadlineExceeded"})
        elif ended is None and started is not None and deletion is not None:  # deleted while it ran
            emit("kill", deletion, signal="SIGKILL", attributes={"reason": "Deleted"})
        if ended is not None:
            reason = str(ended.get("reason") or "")
            if reason == "OOMKilled":
                emit("oom", finished)
            code = ended.get("exitCode")
            emit(
                "die",
                finished,
                exit_code=code if isinstance(code, int) else None,
                attributes={"reason": reason or "Error"},
            )
        if deleted:
            emit("destroy", deletion or datetime.now(UTC))
        return events


def fatal(pod: JsonObject) -> bool:
    """A container waits for a reason after which it never runs (the image missing, a bad config)."""
    blocked = stuck(pod)
    return blocked is not None and blocked.get("reason") in FATAL_WAITING


def gone_or_ended(last: JsonObject | None, gone: bool) -> bool:
    return gone or (last is not None and (ended(last) or deleting(last)))


def ended(pod: JsonObject) -> bool:
    """The container terminated; or the pod is over and its container never ran (a pod failed past its
    deadline still shows the container running until the kubelet has killed it: that is not the end)."""
    if terminated(pod) is not None:
        return True
    return phase(pod) in ("Failed", "Succeeded") and running(pod) is None


def managed_sandbox(pod: JsonObject, alive: dict[str, bool]) -> ManagedSandbox:
    """A pod of ours as the orphan collector sees it (``alive``: which owners hold their lease)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    owner = annotations.get(ANNOTATION_OWNER) or None
    deadline_text = annotations.get(ANNOTATION_DEADLINE) or labels.get(LABEL_DEADLINE)
    try:
        deadline = float(deadline_text) if deadline_text else None
    except ValueError:
        deadline = None
    state = phase(pod).lower() or "unknown"
    return ManagedSandbox(
        sandbox_id=pod_uid(pod),
        name=pod_name(pod),
        execution_id=labels.get(LABEL_EXECUTION_ID),
        owner=owner,
        deadline_unix=deadline,
        state=state,
        owner_alive=None if owner is None else alive.get(owner, False),
    )


def start_problem(name: str, namespace: str, last: JsonObject, gone: bool) -> OrchestratorError | None:
    """Why a pod that neither runs nor ran never will (deleted first, an image or seccomp profile the node
    lacks, a command the kubelet could not start); None when it runs or ran."""
    if running(last) is not None or terminated(last) is not None:
        return None
    details: dict[str, object] = {"sandbox": name, "namespace": namespace}
    if gone:
        return SandboxStartFailed(f"pod {name} was deleted before it started", details=details)
    blocked = stuck(last) or {}
    reason = str(blocked.get("reason") or phase(last))
    message = str(blocked.get("message") or (last.get("status") or {}).get("message") or "")
    details.update({"reason": reason, "message": message[:2000]})
    if FATAL_WAITING.get(reason) == "unavailable":
        return SandboxUnavailable(
            f"the node cannot run image of pod {name} ({reason}); images are never pulled from a"
            f" registry we do not control: {message}",
            details=details,
        )
    if "seccomp" in message.lower():
        return SandboxUnavailable(
            f"the node cannot apply the seccomp profile of pod {name}: {message}", details=details
        )
    if "executable file not found" in message or "no such file or directory" in message:
        details["command_not_found"] = True
    return SandboxStartFailed(f"the kubelet could not start pod {name} ({reason}): {message}", details=details)


def _deadline_time(pod: JsonObject) -> datetime | None:
    for kind in ("DisruptionTarget", "Ready"):
        found = condition(pod, kind)
        if found is not None:
            when = parse_time(found.get("lastTransitionTime"))
            if when is not None:
                return when
    return None
