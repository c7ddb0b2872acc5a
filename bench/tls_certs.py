"""Throwaway certificates for loopback TLS meshes (the TLS benchmark and tests).

    certs = make_certs(tmp_dir)
    TlsConfig(certs.mesh_cert, certs.mesh_key, certs.ca)      # conductor and services
    TlsConfig(certs.client_cert, certs.client_key, certs.ca)  # an SDK client (mutual TLS)
    TlsConfig(ca=certs.wrong_ca)                              # a client trusting another CA

Keys are EC P-256 (fast to make); the mesh certificate names 127.0.0.1 and localhost
and allows server and client authentication: every mesh process is both. Made with
cluster/mesh_ca.py's primitives (what `starmesh up` makes its member certificates with).
"""
from __future__ import annotations

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
    from cluster.mesh_ca import authority, leaf

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = authority("starmesh test CA", days=1)
    wrong_key, wrong = authority("some other CA", days=1)
    paths = {"ca": _write(directory / "ca.pem", ca), "wrong_ca": _write(directory / "wrong-ca.pem", wrong)}
    for name, issuer, is_server in (("mesh", (ca_key, ca), True), ("client", (ca_key, ca), False),
                                    ("wrong_client", (wrong_key, wrong), False)):
        names = {"dns_names": ("localhost",), "ips": ("127.0.0.1",)} if is_server else {}
        key, cert = leaf(f"starmesh {name}", issuer, is_server=is_server, days=1, **names)
        paths[f"{name}_cert"] = _write(directory / f"{name}.pem", cert)
        paths[f"{name}_key"] = _write(directory / f"{name}.key", key)
    return Certs(**paths)


def _write(path: Path, obj) -> str:
    from cluster.mesh_ca import pem

    path.write_bytes(pem(obj))
    if hasattr(obj, "private_bytes"):
        path.chmod(0o600)
    return str(path)
