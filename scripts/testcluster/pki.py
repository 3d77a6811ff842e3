"""The cluster's PKI: a CA of its own and one certificate per identity, made with openssl (ECDSA P-256: fast to
make, accepted by every component), plus the service-account signing key pair. The set is data
(``certificate_set``); ``ensure`` makes all of it again when any piece is missing or expires within a day.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .settings import CLUSTER_DOMAIN, LOOPBACK, NODE_NAME, SERVICE_IP

CA_SUBJECT = "/CN=sandbox-orchestrator-k8s-ca"
CA_DAYS = 3650
LEAF_DAYS = 365
#: certificates expiring within this many seconds are made again
RENEW_BEFORE_S = 86400
#: the API server's identity towards the kubelet (logs, exec, attach): its certificate, and the user it names,
#: whom objects.py binds to the built-in role system:kubelet-api-admin
APISERVER_KUBELET_CLIENT_CERT = "apiserver-kubelet-client"
APISERVER_KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


class PkiError(RuntimeError):
    pass


@dataclass(frozen=True)
class CertSpec:
    name: str  # <name>.key and <name>.crt in the PKI directory
    subject: str  # openssl's /O=.../CN=... form
    usages: tuple[str, ...]  # extendedKeyUsage: serverAuth, clientAuth
    sans: tuple[str, ...] = ()  # subjectAltName entries: IP:..., DNS:...

    def extensions(self) -> str:
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={','.join(self.usages)}",
        ]
        if self.sans:
            lines.append(f"subjectAltName={','.join(self.sans)}")
        return "\n".join(lines) + "\n"


def certificate_set(node_name: str = NODE_NAME) -> tuple[CertSpec, ...]:
    """Every certificate the cluster's components present, signed by the cluster's CA."""
    service_names = (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
    )
    return (
        CertSpec("etcd", "/CN=etcd", ("serverAuth", "clientAuth"), (f"IP:{LOOPBACK}", "DNS:localhost")),
        CertSpec("etcd-client", "/CN=kube-apiserver-etcd-client", ("clientAuth",)),
        CertSpec(
            "apiserver",
            "/CN=kube-apiserver",
            ("serverAuth",),
            (f"IP:{LOOPBACK}", f"IP:{SERVICE_IP}", "DNS:localhost", *(f"DNS:{n}" for n in service_names)),
        ),
        CertSpec(APISERVER_KUBELET_CLIENT_CERT, f"/CN={APISERVER_KUBELET_CLIENT_USER}", ("clientAuth",)),
        CertSpec("admin", "/O=system:masters/CN=sandbox-orchestrator-admin", ("clientAuth",)),
        CertSpec("controller-manager", "/CN=system:kube-controller-manager", ("clientAuth",)),
        CertSpec("scheduler", "/CN=system:kube-scheduler", ("clientAuth",)),
        # the Node authorizer and NodeRestriction know the kubelet by this name and group
        CertSpec("kubelet-client", f"/O=system:nodes/CN=system:node:{node_name}", ("clientAuth",)),
        CertSpec("kubelet-serving", f"/CN={node_name}", ("serverAuth",), (f"DNS:{node_name}", f"IP:{LOOPBACK}")),
    )


def _openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)


def _must(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise PkiError(f"openssl failed to {what}: {proc.stderr.strip()[-500:]}")


def new_key(path: Path) -> None:
    _must(
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)),
        f"make {path}",
    )
    path.chmod(0o600)


def expires_within(cert: Path, seconds: int = RENEW_BEFORE_S) -> bool:
    """True when the certificate is missing, unreadable or expires within ``seconds``."""
    return _openssl("x509", "-checkend", str(seconds), "-noout", "-in", str(cert)).returncode != 0


def make_ca(pki: Path) -> None:
    new_key(pki / "ca.key")
    _must(
        _openssl(
            "req", "-x509", "-new", "-key", str(pki / "ca.key"), "-subj", CA_SUBJECT, "-days", str(CA_DAYS),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-out", str(pki / "ca.crt"),
        ),
        "make the CA",
    )  # fmt: skip


def issue(pki: Path, spec: CertSpec, days: int = LEAF_DAYS) -> None:
    """<name>.key and <name>.crt, signed by the CA in ``pki``."""
    key, csr, crt, ext = (pki / f"{spec.name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
    new_key(key)
    try:
        _must(
            _openssl("req", "-new", "-key", str(key), "-subj", spec.subject, "-out", str(csr)), f"request {spec.name}"
        )
        ext.write_text(spec.extensions())
        _must(
            _openssl(
                "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
                "-CAcreateserial", "-days", str(days), "-out", str(crt), "-extfile", str(ext),
            ),
            f"sign {spec.name}",
        )  # fmt: skip
    finally:
        csr.unlink(missing_ok=True)
        ext.unlink(missing_ok=True)


def valid(pki: Path, specs: tuple[CertSpec, ...]) -> bool:
    """Every key and certificate present, the CA and the leaves good for more than a day."""
    needed = [pki / n for n in ("ca.key", "ca.crt", "sa.key", "sa.pub")]
    needed += [pki / f"{s.name}.{suffix}" for s in specs for suffix in ("key", "crt")]
    if not all(p.is_file() for p in needed):
        return False
    # the set is made together (``make``), the CA living ten times as long as the leaves: one leaf tells when
    # all of it is due (one openssl run: up checks this every time)
    return not expires_within(pki / f"{specs[0].name}.crt")


def make(pki: Path, specs: tuple[CertSpec, ...]) -> None:
    """A new CA, every certificate of ``specs`` and the service-account key pair, in a fresh directory."""
    shutil.rmtree(pki, ignore_errors=True)
    pki.mkdir(parents=True)
    pki.chmod(0o700)
    make_ca(pki)
    for spec in specs:
        issue(pki, spec)
    new_key(pki / "sa.key")
    _must(_openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")), "derive sa.pub")
    (pki / "ca.srl").unlink(missing_ok=True)
