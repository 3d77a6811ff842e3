"""Controller liveness on the cluster: one Lease per controller, renewed while it lives.

Orphan collection must know whether the controller that owns a pod still runs, across pods and nodes,
where a host's process table says nothing. Each controller (its identity: the owner label, a pod's
name where the chart sets SANDBOX_CONTROLLER_ID, else host, pid and start time) holds a Lease in the
sandbox namespace and renews it every ``RENEW_S``; an owner whose Lease is missing or has not been renewed
for ``DURATION_S`` is gone, and its pods are orphans. A controller takes its Lease before it creates its
first pod, so a pod of a live controller always has one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import UTC, datetime, timedelta

from orchestrator.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from orchestrator.backends.kubernetes.kube import JsonObject, KubeClient, KubeError
from orchestrator.backends.kubernetes.lifecycle import parse_time
from orchestrator.backends.kubernetes.manifest import label_value

log = logging.getLogger(__name__)

RENEW_S = 10.0
DURATION_S = 40


def lease_name(owner: str) -> str:
    return f"so-owner-{label_value(owner)}"


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_alive(lease: JsonObject, now: datetime) -> bool:
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return False
    return renewed + timedelta(seconds=duration) >= now


def owners_alive(leases: list[JsonObject], now: datetime) -> dict[str, bool]:
    """Holder identity -> whether its Lease is current."""
    alive: dict[str, bool] = {}
    for lease in leases:
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if isinstance(holder, str):
            alive[holder] = alive.get(holder, False) or lease_alive(lease, now)
    return alive


class OwnerLease:
    """This controller's Lease: taken by :meth:`hold` (blocking, before the first pod), renewed on a daemon
    thread, released by :meth:`release`."""

    def __init__(self, kube: KubeClient, namespace: str, owner: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self.owner = owner
        self.name = lease_name(owner)
        self._lock = threading.Lock()
        self._held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self, existing: JsonObject | None) -> JsonObject:
        now = datetime.now(UTC)
        metadata: JsonObject = {
            "name": self.name,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: label_value(self.owner)},
        }
        if existing is not None:
            metadata["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.owner,
                "leaseDurationSeconds": DURATION_S,
                "renewTime": _micro_time(now),
                **({"acquireTime": _micro_time(now)} if existing is None else {}),
            },
        }

    def _renew(self) -> None:
        try:
            current = self._kube.get_lease(self._namespace, self.name)
        except KubeError as exc:
            if exc.kind != "not_found":
                raise
            self._kube.create_lease(self._namespace, self._body(None))
            return
        body = self._body(current)
        body["spec"]["acquireTime"] = (current.get("spec") or {}).get("acquireTime")
        self._kube.replace_lease(self._namespace, self.name, body)

    def hold(self) -> None:
        """Take (or renew) the Lease now; start renewing it. Raises KubeError if the server refuses."""
        with self._lock:
            self._renew()
            if self._held:
                return
            self._held = True
            self._thread = threading.Thread(target=self._keep, name="k8s-owner-lease", daemon=True)
            self._thread.start()

    @property
    def held(self) -> bool:
        return self._held

    def _keep(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                with self._lock:
                    self._renew()
            except KubeError as exc:  # the next renewal tries again; DURATION_S leaves room for three
                log.warning("could not renew the controller's lease %s: %s", self.name, exc)

    def release(self) -> None:
        self._stop.set()
        if not self._held:
            return
        self._held = False
        with contextlib.suppress(KubeError):
            self._kube.delete_lease(self._namespace, self.name)
