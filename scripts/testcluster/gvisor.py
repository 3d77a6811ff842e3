"""RuntimeClass gvisor exists only when gVisor really runs pods here: proven once per shim, runsc and
containerd (the verdict's key is cached in gvisor.proven); otherwise there is none, and the reason is in
gvisor.unavailable (the backend then reports SANDBOX.UNAVAILABLE for profiles that ask for gVisor).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from datetime import datetime
from typing import Any

from . import objects, supervise
from .daemons import containerd_binary
from .settings import GVISOR_PROBE_NAMESPACE, Settings

PROBE_TIMEOUT_S = 90.0


def shim_stamp(s: Settings) -> str:
    try:
        return (s.gvisor_shim.parent / f"{s.gvisor_shim.name}.version").read_text().strip()
    except OSError:
        return ""


def key(s: Settings) -> str:
    """What the probe's verdict depends on: the shim (its version and patches), runsc, containerd."""
    runsc = hashlib.sha256(s.runsc.read_bytes()).hexdigest()[:16]
    version = subprocess.run([str(containerd_binary(s)), "--version"], capture_output=True, text=True, check=False)
    words = version.stdout.split()
    containerd = words[2] if len(words) > 2 else ""
    return f"shim={shim_stamp(s)} runsc={runsc} containerd={containerd}"


def shim_points_at_our_kubelet(s: Settings) -> bool:
    """gVisor's shim is built to find pods' volumes below our kubelet's root (scripts/k8s-build.sh)."""
    return f"kubelet-pods-dir={s.kubelet_pods_dir}" in shim_stamp(s)


def probe(api: Any) -> bool:
    """A hardened pod under RuntimeClass gvisor must succeed and report a kernel release other than the host's."""
    objects.apply(api, objects.probe_namespace())
    objects.apply(api, objects.probe_pod())
    phase: str | None = None
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while time.monotonic() < deadline:
        phase = objects.pod_phase(api, GVISOR_PROBE_NAMESPACE, objects.PROBE_POD)
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    release = objects.pod_log(api, GVISOR_PROBE_NAMESPACE, objects.PROBE_POD).strip()
    return phase == "Succeeded" and bool(release) and release != platform.release()


def explain_failure(s: Settings, api: Any, verdict_key: str) -> None:
    """Why the probe failed, for whoever reads the warning: the pod's status, its events, its log, and
    containerd's lines about runsc."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    parts = [
        f"# the gVisor probe failed on {datetime.now().astimezone().isoformat(timespec='seconds')} ({verdict_key})"
    ]
    try:
        status = core.read_namespaced_pod_status(objects.PROBE_POD, GVISOR_PROBE_NAMESPACE).status
        parts += ["## pod status", json.dumps(api.sanitize_for_serialization(status))]
    except Exception as exc:  # the explanation takes what it can get
        parts += ["## pod status", str(exc)]
    try:
        events = core.list_namespaced_event(GVISOR_PROBE_NAMESPACE).items
        parts += ["## events", *(f"{e.reason} {e.message}" for e in events)]
    except Exception as exc:
        parts += ["## events", str(exc)]
    parts += ["## pod log", objects.pod_log(api, GVISOR_PROBE_NAMESPACE, objects.PROBE_POD)]
    try:
        runsc_lines = [
            line
            for line in s.log_file("containerd").read_text(errors="replace").splitlines()
            if "runsc" in line.lower()
        ]
    except OSError:
        runsc_lines = []
    parts += ["## containerd log (runsc)", *runsc_lines[-20:]]
    s.gvisor_reason.write_text("\n".join(parts) + "\n")


def unavailable(s: Settings, api: Any, reason: str) -> None:
    objects.delete_runtime_class(api)
    s.gvisor_stamp.unlink(missing_ok=True)
    supervise.warn(reason)


def ensure(s: Settings, api: Any) -> None:
    if not os.access(s.runsc, os.X_OK) or not os.access(s.gvisor_shim, os.X_OK):
        s.gvisor_reason.write_text(
            f"runsc ({s.runsc}) or containerd-shim-runsc-v1 ({s.gvisor_shim.parent}) is missing\n"
        )
        unavailable(s, api, f"no RuntimeClass gvisor: {s.gvisor_reason.read_text().strip()}")
        return
    if not shim_points_at_our_kubelet(s):
        supervise.warn(
            f"{s.gvisor_shim} was built for another kubelet root than {s.kubelet_pods_dir} "
            f"(its stamp: {shim_stamp(s)!r}): pods' shared in-memory volumes will not be found"
        )
    verdict_key = key(s)
    objects.apply(api, objects.runtime_class())
    try:
        proven = s.gvisor_stamp.read_text().strip()
    except OSError:
        proven = ""
    if proven == verdict_key:
        return
    try:
        if probe(api):
            s.gvisor_stamp.write_text(verdict_key + "\n")
            s.gvisor_reason.unlink(missing_ok=True)
        else:
            explain_failure(s, api, verdict_key)
            unavailable(s, api, f"gVisor does not run pods here: no RuntimeClass gvisor (details: {s.gvisor_reason})")
    finally:
        objects.delete_probe_namespace(api)
