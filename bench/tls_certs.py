"""Throwaway certificates for loopback TLS meshes (the TLS benchmark and tests).

    certs = make_certs(tmp_dir)
    TlsConfig(certs.mesh_cert, certs.mesh_key, certs.ca)      # conductor and services
    TlsConfig(certs.client_cert, certs.client_key, certs.ca)  # an SDK client (mutual TLS)
    TlsConfig(ca=certs.wrong_ca)                              # a client trusting another CA

Keys are EC P-256 (fast to make); the mesh certificate names 127.0.0.1 and localhost
and allows server and client authentication: every mesh process is both. Needs the
`cryptography` package (the `test` extra).
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    """PEM file paths."""

    ca: str
    mesh_cert: str
    mesh_key: str
    client_cert: str
    client_key: str
    wrong_ca: str
    wrong_client_cert: str  # a client certificate signed by wrong_ca
    wrong_client_key: str


def make_certs(directory: "str | Path") -> Certs:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _authority("starmesh test CA")
    wrong_key, wrong = _authority("some other CA")
    paths = {"ca": _write(directory / "ca.pem", ca), "wrong_ca": _write(directory / "wrong-ca.pem", wrong)}
    for name, issuer, is_server in (("mesh", (ca_key, ca), True), ("client", (ca_key, ca), False),
                                    ("wrong_client", (wrong_key, wrong), False)):
        key, cert = _leaf(f"starmesh {name}", issuer, is_server)
        paths[f"{name}_cert"] = _write(directory / f"{name}.pem", cert)
        paths[f"{name}_key"] = _write(directory / f"{name}.key", key)
    return Certs(**paths)


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject, issuer, public_key):
    from cryptography import x509

    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))


def _authority(common_name: str):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)
    cert = (_builder(_name(common_name), _name(common_name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(common_name: str, issuer, is_server: bool):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    issuer_key, issuer_cert = issuer
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if is_server else [])
    builder = (_builder(_name(common_name), issuer_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if is_server:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, obj) -> str:
    from cryptography.hazmat.primitives import serialization

    if hasattr(obj, "private_bytes"):
        data = obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
        path.write_bytes(data)
        path.chmod(0o600)
    else:
        path.write_bytes(obj.public_bytes(serialization.Encoding.PEM))
    return str(path)
