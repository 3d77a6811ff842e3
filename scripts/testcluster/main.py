"""The command line: ``up``, ``down``, ``status``, ``env`` (what scripts/k8s-cluster.sh runs after it installed
the host's packages and built the binaries).

  up       start what is not running, wait until the node is Ready (idempotent; well under a second when up)
  down     delete the pods, stop everything, clean mounts, network namespaces, the bridge and the cluster's
           objects (binaries, PKI and the imported images stay)
  status   exit 0 when the API server answers and the node is Ready (prints "up: ..." or "down")
  env      print `export KUBECONFIG=...`, the egress attachment, and `export PATH=<bin dir>:$PATH`

status and env need nothing beyond the standard library; up and down need the project's environment (the
``kubernetes`` client and PyYAML: scripts/k8s-cluster.sh runs them with the venv's python).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import health, supervise
from .settings import API_SERVER, EGRESS_NETNS_PATH, NODE_NAME, REPO_DIR, Settings, SettingsError

COMMANDS = ("up", "down", "status", "env")
#: what up and down import beyond the standard library (pyproject.toml's dependencies)
NEEDED = {"up": ("kubernetes", "yaml"), "down": ("kubernetes", "yaml")}


def status(s: Settings) -> bool:
    """Prints and returns whether the API server answers and the node is Ready."""
    kubectl_ok = s.bin_dir is None or os.access(s.binary("kubectl"), os.X_OK)
    if kubectl_ok and os.access(s.admin_kubeconfig, os.R_OK) and health.api_ready(s) and health.node_ready(s):
        print(f"up: {API_SERVER}, node {NODE_NAME} Ready")
        return True
    print("down")
    return False


def env_lines(s: Settings) -> list[str]:
    """``export`` lines for a shell: the admin kubeconfig, where a controller on this host opens the egress
    proxy for the pods (backend.kubernetes.egress), and the bin dir (kubectl, helm) first on PATH."""
    q = shlex.quote
    return [
        f"export KUBECONFIG={q(str(s.admin_kubeconfig))}",
        f"export SANDBOX_K8S_EGRESS_NETNS={q(str(EGRESS_NETNS_PATH))} SANDBOX_K8S_EGRESS_ADDRESS={q(str(s.egress_ip))}",
        f'export PATH={q(str(s.bin_dir))}:"$PATH"',
    ]


def built_bin_dir() -> Path:
    """The bin dir scripts/k8s-build.sh builds into (asked, nothing built)."""
    out = subprocess.run(
        ["bash", str(REPO_DIR / "scripts" / "k8s-build.sh"), "--bin-dir"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="k8s-cluster.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument(
        "--bin-dir", type=Path, help="the Kubernetes binaries (default: scripts/k8s-build.sh --bin-dir)"
    )
    parser.add_argument(
        "--containerd",
        type=Path,
        help="the containerd the node runs (default: containerd on PATH; SANDBOX_K8S_PLEG=evented needs it)",
    )
    return parser.parse_args(argv)


def settings_for(args: argparse.Namespace) -> Settings:
    s = Settings.from_env(bin_dir=args.bin_dir or built_bin_dir())
    if args.command != "up":
        return s
    containerd = args.containerd
    if containerd is None:
        if s.pleg == "evented":
            raise SettingsError("SANDBOX_K8S_PLEG=evented needs --containerd (scripts/k8s-cluster.sh unpacks trixie's)")
        found = shutil.which("containerd")
        if found is None:
            raise SettingsError("containerd not found (make setup installs it)")
        containerd = Path(found)
    return Settings.from_env(bin_dir=s.bin_dir, containerd_bin=containerd)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    missing = [m for m in NEEDED.get(args.command, ()) if importlib.util.find_spec(m) is None]
    if missing:
        supervise.say(
            f"error: {args.command} needs {', '.join(missing)} ({sys.executable} has not): run `make venv`; "
            "scripts/k8s-cluster.sh then runs this with .venv/bin/python"
        )
        return 1
    try:
        s = settings_for(args)
        if args.command == "status":
            return 0 if status(s) else 1
        if args.command == "env":
            print("\n".join(env_lines(s)))
            return 0
        from . import cluster, daemons, images, network, pki

        failures = (cluster.ClusterError, daemons.DaemonError, images.ImageError, network.NetworkError, pki.PkiError)
        try:
            cluster.up(s) if args.command == "up" else cluster.down(s)
        except failures as exc:
            supervise.say(f"error: {exc}")
            return 1
    except (SettingsError, subprocess.CalledProcessError) as exc:
        supervise.say(f"error: {exc}")
        return 1
    return 0
