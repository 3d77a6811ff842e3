"""Pod snapshots (as a watch delivers them) onto lifecycle events and the exit state."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.backends.base import LABEL_EXECUTION_ID
from orchestrator.backends.kubernetes.lifecycle import PodLifecycle, deleted_before_its_end, exit_state
from orchestrator.backends.kubernetes.owners import lease_alive, owners_alive

T0 = "2026-11-24T10:00:00Z"
T1 = "2026-11-24T10:00:01Z"
T2 = "2026-11-24T10:00:02Z"
T3 = "2026-11-24T10:00:05Z"
T4 = "2026-11-24T10:00:06Z"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "sbx-ex-1",
            "uid": "uid-1",
            "creationTimestamp": T0,
            "labels": {LABEL_EXECUTION_ID: "ex-1"},
        },
        "spec": {"nodeName": "localhost"},
        "status": status,
    }


def scheduled() -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": T1}


def container(state: dict[str, Any], image_id: str = "sha256:abc") -> dict[str, Any]:
    return {"containerStatuses": [{"name": "sandbox", "state": state, "imageID": image_id}]}


def test_a_pod_that_runs_to_its_end_gives_each_record_once_with_the_servers_times() -> None:
    life = PodLifecycle()
    snapshots = [
        (pod(phase="Pending"), False),
        (pod(phase="Pending", conditions=[scheduled()]), False),
        (pod(phase="Running", conditions=[scheduled()], **container({"running": {"startedAt": T2}})), False),
        (
            pod(
                phase="Succeeded",
                conditions=[scheduled()],
                **container({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": T2, "finishedAt": T3}}),
            ),
            False,
        ),
    ]
    events = [e for snap, deleted in snapshots for e in life.update(snap, deleted=deleted)]
    events += life.update(snapshots[-1][0], deleted=False)  # a repeated snapshot adds nothing
    gone = copy.deepcopy(snapshots[-1][0])
    gone["metadata"]["deletionTimestamp"] = T4
    events += life.update(gone, deleted=True)
    assert [(e.kind, e.engine_ts, e.exit_code) for e in events] == [
        ("create", at(T0), None),
        ("schedule", at(T1), None),
        ("start", at(T2), None),
        ("die", at(T3), 0),
        ("destroy", at(T4), None),
    ]
    assert all(e.sandbox_id == "uid-1" and e.execution_id == "ex-1" for e in events)
    assert events[1].attributes == {"node": "localhost"}
    assert life.done()


def test_oom_and_deadline_are_reported_as_the_kubelet_said() -> None:
    oom = pod(
        phase="Failed",
        **container({"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": T2, "finishedAt": T3}}),
    )
    kinds = [e.kind for e in PodLifecycle().update(oom)]
    assert kinds == ["create", "start", "oom", "die"]
    state = exit_state(oom)
    assert (state.exit_code, state.oom_killed, state.error, state.image_id) == (137, True, None, "sha256:abc")

    deadline = pod(
        phase="Failed",
        reason="DeadlineExceeded",
        conditions=[{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": T3}],
        **container({"terminated": {"exitCode": 137, "reason": "Error", "startedAt": T2, "finishedAt": T4}}),
    )
    events = PodLifecycle().update(deadline)
    kill = next(e for e in events if e.kind == "kill")
    assert (kill.engine_ts, kill.attributes["reason"]) == (at(T3), "DeadlineExceeded")
    assert exit_state(deadline).exit_code == 137


def test_a_pod_deleted_while_running_is_killed_then_destroyed() -> None:
    life = PodLifecycle()
    life.update(pod(phase="Running", **container({"running": {"startedAt": T2}})))
    deleting = pod(phase="Running", **container({"running": {"startedAt": T2}}))
    deleting["metadata"]["deletionTimestamp"] = T3
    kinds = [e.kind for e in life.update(deleting)] + [e.kind for e in life.update(deleting, deleted=True)]
    assert kinds == ["kill", "destroy"]


def test_a_container_that_never_started_says_why() -> None:
    stuck = pod(phase="Pending", **container({"waiting": {"reason": "ErrImageNeverPull", "message": "no image"}}))
    state = exit_state(stuck)
    assert state.exit_code is None and state.error == "ErrImageNeverPull: no image"


def test_leases_tell_which_owners_live() -> None:
    now = datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
    fresh = {
        "spec": {
            "holderIdentity": "a",
            "renewTime": (now - timedelta(seconds=5)).isoformat(),
            "leaseDurationSeconds": 40,
        }
    }
    stale = {
        "spec": {
            "holderIdentity": "b",
            "renewTime": (now - timedelta(seconds=60)).isoformat(),
            "leaseDurationSeconds": 40,
        }
    }
    broken = {"spec": {"holderIdentity": "c"}}
    assert lease_alive(fresh, now) and not lease_alive(stale, now) and not lease_alive(broken, now)
    assert owners_alive([fresh, stale, broken], now) == {"a": True, "b": False, "c": False}


def _ended_at(finished: str, deleted: str | None) -> dict[str, Any]:
    snapshot = pod(
        containerStatuses=[
            {"name": "sandbox", "state": {"terminated": {"exitCode": 0, "startedAt": T1, "finishedAt": finished}}}
        ]
    )
    if deleted is not None:
        snapshot["metadata"]["deletionTimestamp"] = deleted
    return snapshot


def test_a_pod_deleted_before_its_end_was_stopped_by_the_deletion() -> None:
    """Deleted before (or in the same second as) its container ended: the end was the deletion's doing, whatever
    exit the command chose; deleted after it ended on its own, or never: its end is its own."""
    assert deleted_before_its_end(_ended_at(T3, T2))
    assert deleted_before_its_end(_ended_at(T3, T3))  # the API server's times are to the second
    assert not deleted_before_its_end(_ended_at(T2, T3))
    assert not deleted_before_its_end(_ended_at(T3, None))
    # a graceful deletion: its timestamp is the request's time plus the grace period
    graceful = _ended_at(T3, "2026-11-24T10:00:32Z")
    graceful["metadata"]["deletionGracePeriodSeconds"] = 30
    assert deleted_before_its_end(graceful)  # asked at 10:00:02, ended (on the SIGTERM) at 10:00:05
    running = pod(containerStatuses=[{"name": "sandbox", "state": {"running": {"startedAt": T1}}}])
    running["metadata"]["deletionTimestamp"] = T2
    assert deleted_before_its_end(running)  # still running as it is deleted
