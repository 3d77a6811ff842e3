"""The PKI step's certificate set, issued with openssl into a temporary directory: who each certificate names,
what it may be used for, the addresses it is good for, and that the CA signed it."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from scripts.testcluster import pki
from scripts.testcluster.objects import kubelet_api_binding
from scripts.testcluster.settings import KUBECONFIG_USERS, NODE_NAME

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")

SPECS = pki.certificate_set()


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki") / "pki"
    pki.make(directory, SPECS)
    return directory


def text(cert: Path) -> str:
    return subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-nameopt", "RFC2253", "-in", str(cert)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def extension(dump: str, name: str) -> str:
    """The value line of an X509v3 extension in openssl's text dump."""
    lines = dump.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"X509v3 {name}"):
            return lines[i + 1].strip()
    return ""


def test_the_set_is_complete(issued: Path) -> None:
    names = {spec.name for spec in SPECS}
    assert names == {
        "etcd", "etcd-client", "apiserver", "apiserver-kubelet-client", "admin", "controller-manager", "scheduler",
        "kubelet-client", "kubelet-serving",
    }  # fmt: skip
    assert set(KUBECONFIG_USERS.values()) <= names  # every kubeconfig's user has its certificate
    expected = {"ca.crt", "ca.key", "sa.key", "sa.pub"} | {f"{n}.{s}" for n in names for s in ("crt", "key")}
    assert {p.name for p in issued.iterdir()} == expected  # no csr, ext or serial file left
    assert stat.S_IMODE(issued.stat().st_mode) == 0o700
    for key in issued.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


def test_every_certificate_is_signed_by_the_ca(issued: Path) -> None:
    for spec in SPECS:
        verified = subprocess.run(
            ["openssl", "verify", "-CAfile", str(issued / "ca.crt"), str(issued / f"{spec.name}.crt")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_ca(issued: Path) -> None:
    dump = text(issued / "ca.crt")
    assert "Subject: CN=sandbox-orchestrator-k8s-ca" in dump
    assert extension(dump, "Basic Constraints") == "CA:TRUE"
    assert extension(dump, "Key Usage") == "Certificate Sign, CRL Sign"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_subject_usages_and_names(issued: Path, spec: pki.CertSpec) -> None:
    dump = text(issued / f"{spec.name}.crt")
    assert extension(dump, "Basic Constraints") == "CA:FALSE"
    assert extension(dump, "Key Usage") == "Digital Signature, Key Encipherment"
    usages = {"serverAuth": "TLS Web Server Authentication", "clientAuth": "TLS Web Client Authentication"}
    assert extension(dump, "Extended Key Usage") == ", ".join(usages[u] for u in spec.usages)
    rfc2253 = ",".join(reversed(spec.subject.strip("/").split("/")))
    assert f"Subject: {rfc2253}" in dump
    assert "ASN1 OID: prime256v1" in dump  # ECDSA P-256
    sans = extension(dump, "Subject Alternative Name")
    if spec.sans:
        openssl_form = [s.replace("IP:", "IP Address:") for s in spec.sans]
        assert sans.split(", ") == openssl_form
    else:
        assert "Subject Alternative Name" not in dump


def test_what_the_components_rely_on() -> None:
    by_name = {spec.name: spec for spec in SPECS}
    # the API server answers on 127.0.0.1 and as the kubernetes Service
    assert {"IP:127.0.0.1", "IP:10.254.0.1", "DNS:kubernetes.default.svc.cluster.local"} <= set(
        by_name["apiserver"].sans
    )
    # the API server reaches the kubelet by the node's name, and checks its serving certificate
    assert by_name["kubelet-serving"].sans == (f"DNS:{NODE_NAME}", "IP:127.0.0.1")
    # the Node authorizer knows the kubelet by its name and group
    assert by_name["kubelet-client"].subject == f"/O=system:nodes/CN=system:node:{NODE_NAME}"
    assert by_name["admin"].subject.startswith("/O=system:masters/")
    # the RBAC binding names the user of the API server's kubelet client certificate
    (subject,) = kubelet_api_binding()["subjects"]
    assert by_name[pki.APISERVER_KUBELET_CLIENT_CERT].subject == f"/CN={subject['name']}"


def test_validity(issued: Path, tmp_path: Path) -> None:
    assert pki.valid(issued, SPECS)
    copy = tmp_path / "pki"
    shutil.copytree(issued, copy)
    (copy / "scheduler.key").unlink()
    assert not pki.valid(copy, SPECS)
    assert not pki.valid(tmp_path / "nothing", SPECS)
    assert not pki.expires_within(issued / "ca.crt")
    assert pki.expires_within(issued / "etcd.crt", 400 * 86400)  # a leaf lives a year
    assert pki.expires_within(tmp_path / "missing.crt")


def test_a_certificate_that_expires_within_a_day_remakes_the_set(tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    pki.make(directory, SPECS[:1])
    assert pki.valid(directory, SPECS[:1])
    pki.issue(directory, SPECS[0], days=0)  # expires now
    assert not pki.valid(directory, SPECS[:1])
