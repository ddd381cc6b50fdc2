"""TLS to a gate endpoint behind an Ingress whose certificate comes from the company's own CA.

A real HTTPS server on loopback serves a certificate signed by a CA made for the test: it is
refused until SSL_CERT_FILE names that CA, as OpenSSL, curl and Python read it, while the proxy
variables stay ignored. (SSL_CERT_DIR goes through the same call, as a capath.)
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
import ssl
from collections.abc import Iterator

import localserver
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator import errors, http


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None, signer: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(signer, hashes.SHA256())


class _Health(localserver.QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def company_ca_server(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    """(https URL of a /health server, the PEM of the CA that signed its certificate)."""
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("Example Pharma Internal CA", ca_key, None, ca_key)
    leaf = _certificate("llama3-70b.infer.internal", leaf_key, ca.subject, ca_key)
    ca_pem, chain = tmp_path / "company-ca.pem", tmp_path / "server.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key_pem = leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    http._tls.cache_clear()
    try:
        with localserver.serve(_Health, tls=context) as url:
            yield url, ca_pem
    finally:
        http._tls.cache_clear()


def test_a_certificate_from_an_unknown_ca_is_refused(
    company_ca_server: tuple[str, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = company_ca_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    result = http.check_health(url)
    assert not result.ok and "certificate" in result.detail.lower(), result.detail


def test_ssl_cert_file_adds_the_company_ca(
    company_ca_server: tuple[str, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = company_ca_server
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # still ignored: the CA variables come alone
    result = http.check_health(url)
    assert result.ok, result.detail


def test_a_ca_file_that_cannot_be_read_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    http._tls.cache_clear()
    try:
        with pytest.raises(errors.EndpointError, match=r"SSL_CERT_FILE=.*missing\.pem: cannot load CA certificates"):
            http.check_health("https://127.0.0.1:9")
    finally:
        http._tls.cache_clear()
