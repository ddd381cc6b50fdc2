"""Certificates and keys for the local test cluster.

One throw-away CA signs everything: the API server's and kwok's serving certificates, a
client certificate per component (its identity for RBAC comes from CN and O), and the
ServiceAccount token signing key. ECDSA P-256 keys keep generation instant.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# Regenerate well before expiry so a long-lived state directory never serves an expired cert.
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class ClientIdentity:
    """Who a client certificate authenticates as: CN is the user, O the groups."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


# system:kube-controller-manager and system:kube-scheduler are bound by the API server's
# bootstrap RBAC policy, so those two run with exactly the rights a real cluster gives them.
# kwok and the API server's kubelet client are simulator plumbing, not under test: masters.
ADMIN = ClientIdentity("admin", "deployctl-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("kube-scheduler", "system:kube-scheduler")
KWOK = ClientIdentity("kwok", "kwok-controller", ("system:masters",))
KUBELET_CLIENT = ClientIdentity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, KWOK, KUBELET_CLIENT)

# The in-cluster names a real API server certificate carries, plus loopback, which is the
# only address this cluster listens on. 10.96.0.1 is the first IP of the service range.
APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class Pki:
    """Paths of the generated material (PEM files)."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def cert(self, stem: str) -> Path:
        return self.dir / f"{stem}.crt"

    def key(self, stem: str) -> Path:
        return self.dir / f"{stem}.key"


def ensure(pki_dir: Path) -> Pki:
    """Return the PKI under `pki_dir`, generating it when missing or close to expiry."""
    pki = Pki(pki_dir)
    if _usable(pki):
        return pki
    # Build in a sibling directory and swap it in, so an interrupted run never leaves a
    # half-written mix of old and new certificates behind.
    pki_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pki-", dir=pki_dir.parent))
    _generate(Pki(tmp))
    if pki_dir.exists():
        shutil.rmtree(pki_dir)
    tmp.rename(pki_dir)
    return pki


def _usable(pki: Pki) -> bool:
    wanted = [
        pki.ca_cert,
        pki.ca_key,
        pki.sa_key,
        pki.sa_pub,
        pki.cert("apiserver"),
        pki.cert("kwok-serving"),
    ]
    wanted += [pki.cert(c.file_stem) for c in CLIENTS]
    if not all(p.exists() for p in wanted):
        return False
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    return ca.not_valid_after_utc - _now() > RENEW_BEFORE


def _generate(pki: Pki) -> None:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "deployctl-e2e-ca")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca)

    def leaf(stem: str, subject: x509.Name, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(subject, ca.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        _write_key(pki.key(stem), key)
        _write_cert(pki.cert(stem), builder.sign(ca_key, hashes.SHA256()))

    apiserver_san: list[x509.GeneralName] = [x509.DNSName(n) for n in APISERVER_DNS]
    apiserver_san += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    leaf("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, apiserver_san)
    # The API server dials kwok at the nodes' InternalIP (127.0.0.1) and verifies it.
    kwok_san: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    leaf("kwok-serving", _name("kwok-kubelet"), ExtendedKeyUsageOID.SERVER_AUTH, kwok_san)
    for client in CLIENTS:
        leaf(client.file_stem, _name(client.user, client.groups), ExtendedKeyUsageOID.CLIENT_AUTH, [])

    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # Backdated a little so a clock that is a few seconds off does not reject fresh certs.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
