"""The test cluster's figures (scripts/k8s-cluster.sh): pod latency and what its components cost.

* **pods** — a hardened pod (uid 1000, read-only root, no capabilities, seccomp RuntimeDefault, no token,
  imagePullPolicy Never, image sandbox-orchestrator/minimal) running ``true``, created through the API
  server and watched until Succeeded (scheduler, kubelet, containerd, runc or gVisor); then its log read
  back through the API server, then deleted. Runs alternate between runc and RuntimeClass gvisor (when
  the cluster has it). Prints p50/min/max of create→Succeeded and of the log read.
* **memory** — resident set size of each component (pid files under $SANDBOX_RUN_DIR/k8s), measured
  after the pod runs.

Not a test: it prints figures and a last line ``SUMMARY {...}`` (JSON). The cluster is found and started
as the tests do (``benchmarks/cluster.py``).

    .venv/bin/python benchmarks/k8s_cluster.py [--runs 10] [--quick]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import cluster_session
from options import parse

from scripts.testcluster.settings import COMPONENTS, Settings
from tests.support.k8s import hardened_pod
from tests.support.kube import host_env


def run_once(core: Any, namespace: str, runtime_class: str | None) -> tuple[float, float]:
    name = f"bench-{secrets.token_hex(4)}"
    t0 = time.perf_counter()
    core.create_namespaced_pod(namespace, hardened_pod(name, ["true"], runtime_class=runtime_class))
    while True:
        phase = core.read_namespaced_pod_status(name, namespace).status.phase
        if phase == "Succeeded":
            break
        if phase == "Failed":
            raise SystemExit(f"pod {name} failed")
        time.sleep(0.05)
    t1 = time.perf_counter()
    core.read_namespaced_pod_log(name, namespace)
    t2 = time.perf_counter()
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return t1 - t0, t2 - t1


def rss_mib(cluster: Settings) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in COMPONENTS:
        pid = cluster.pid_file(name).read_text().strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out[name] = int(line.split()[1]) / 1024
    return out


def summary(values: list[float], unit: str = "s") -> str:
    scale = 1000 if unit == "ms" else 1
    p50, low, high = (scale * v for v in (statistics.median(values), min(values), max(values)))
    return f"p50 {p50:.2f} {unit}  min {low:.2f}  max {high:.2f}  (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parse(parser, {"runs": 1})
    with cluster_session() as found:
        measure(args.runs, str(found.kubeconfig))


def measure(runs: int, kubeconfig: str) -> None:
    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    classes = [rc.metadata.name for rc in client.NodeV1Api(api).list_runtime_class().items]
    runtimes: list[str | None] = [None, "gvisor"] if "gvisor" in classes else [None]
    namespace = f"so-bench-{secrets.token_hex(3)}"
    core.create_namespace(
        {"metadata": {"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    try:
        run_once(core, namespace, None)  # warm-up: the first pod of a namespace waits for its ServiceAccount
        results: dict[str | None, tuple[list[float], list[float]]] = {r: ([], []) for r in runtimes}
        for _ in range(runs):
            for runtime in runtimes:
                started, logged = run_once(core, namespace, runtime)
                results[runtime][0].append(started)
                results[runtime][1].append(logged)
        figures: dict[str, float] = {}
        for runtime, (started, logged) in results.items():
            label = runtime or "runc"
            print(f"{label:7} create→Succeeded  {summary(started)}")
            print(f"{label:7} log via API       {summary(logged, 'ms')}")
            figures[f"{label} create→Succeeded p50 s"] = round(statistics.median(started), 3)
            figures[f"{label} log via API p50 ms"] = round(statistics.median(logged) * 1000, 2)
        # the cluster's pid files, where the cluster script keeps them (the machine's state and run dirs)
        for name, mib in rss_mib(Settings.from_env(host_env())).items():
            print(f"RSS {name:24} {mib:6.0f} MiB")
            figures[f"RSS {name} MiB"] = round(mib)
        figures["runs"] = runs
        print("SUMMARY " + json.dumps(figures, ensure_ascii=False))
    finally:
        core.delete_namespace(namespace)
        api.close()


if __name__ == "__main__":
    main()
