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
    thread, released by :meth:`release`.

    One per owner in a process, whatever the number of backends (:func:`shared_lease`): two objects renewing
    one Lease each from its own resourceVersion conflict ("the object has been modified"), and the first to
    close would delete the Lease under the other's live pods. Each backend lends its client; renewals use
    whichever is still lent, and the Lease is deleted when the last backend gives it back."""

    def __init__(self, namespace: str, owner: str) -> None:
        self._namespace = namespace
        self.owner = owner
        self.name = lease_name(owner)
        self._lock = threading.Lock()
        self._clients: list[KubeClient] = []
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

    def _renew(self, kube: KubeClient) -> None:
        """Create or renew it; a conflict (someone wrote it between our read and write: a controller of
        the same identity restarted) is read again and retried once."""
        for attempt in range(2):
            try:
                current = kube.get_lease(self._namespace, self.name)
            except KubeError as exc:
                if exc.kind != "not_found":
                    raise
                try:
                    kube.create_lease(self._namespace, self._body(None))
                    return
                except KubeError as created:
                    if created.kind != "conflict" or attempt:  # 409: created meanwhile
                        raise
                    continue
            body = self._body(current)
            body["spec"]["acquireTime"] = (current.get("spec") or {}).get("acquireTime")
            try:
                kube.replace_lease(self._namespace, self.name, body)
                return
            except KubeError as exc:
                if exc.kind != "conflict" or attempt:
                    raise

    def hold(self, kube: KubeClient) -> None:
        """Take (or renew) the Lease now through ``kube`` (lent until :meth:`release` gives it back); start
        renewing it. Raises KubeError if the server refuses."""
        with self._lock:
            self._renew(kube)
            if kube not in self._clients:
                self._clients.append(kube)
            if self._held:
                return
            self._held = True
            self._stop.clear()
            self._thread = threading.Thread(target=self._keep, name="k8s-owner-lease", daemon=True)
            self._thread.start()

    def held_by(self, kube: KubeClient) -> bool:
        return self._held and kube in self._clients

    def _keep(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                with self._lock:
                    if self._clients:
                        self._renew(self._clients[-1])
            except KubeError as exc:  # the next renewal tries again; DURATION_S leaves room for three
                log.warning("could not renew the controller's lease %s: %s", self.name, exc)

    def release(self, kube: KubeClient) -> None:
        """``kube`` is given back; the last one deletes the Lease (its pods are gone or orphans now)."""
        with self._lock:
            if kube in self._clients:
                self._clients.remove(kube)
            if self._clients or not self._held:
                return
            self._held = False
            self._stop.set()
            with contextlib.suppress(KubeError):
                kube.delete_lease(self._namespace, self.name)


_SHARED: dict[tuple[str, str, str], OwnerLease] = {}
_SHARED_LOCK = threading.Lock()


def shared_lease(cluster: str, namespace: str, owner: str) -> OwnerLease:
    """This process's one OwnerLease of ``owner`` in ``namespace`` of the cluster at ``cluster``."""
    with _SHARED_LOCK:
        lease = _SHARED.get((cluster, namespace, owner))
        if lease is None:
            lease = _SHARED[(cluster, namespace, owner)] = OwnerLease(namespace, owner)
        return lease
