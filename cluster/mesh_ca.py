"""A deployment's own CA and member certificate: what makes its processes trust only each
other (mutual TLS between members, runtime/tls.py `member_tls`).

    files = member_files("local")            # {"ca.pem": ..., "member.pem": ..., "member.key": ...}
    write_member_files(directory, files)     # 0700 directory, 0600 files
    python -m cluster.mesh_ca DIR            # the same, once (compose's one-shot `mesh-ca` container)

`starmesh up` makes a fresh set at every start in a directory of its own under the cache
root (`up_directory`) and removes it at stop; `starmesh render kubernetes` puts a set in
a Secret; compose's `mesh-ca` container writes one into a volume. Each set is a new CA
(EC P-256) and one member certificate for every process of the deployment, naming
runtime.tls.MEMBER_NAME (what members check each other against, at any address) and
127.0.0.1 / ::1 / localhost (a probe on the process's own host: `starmesh health`), for
both server and client authentication. The CA's private key is used to sign and then
dropped: it is never written, so nothing can sign another member later. No key is ever
printed or logged.
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
import shutil
import sys
from pathlib import Path

from core.cache_root import cache_root
from runtime.tls import MEMBER_FILES, MEMBER_NAME

VALID_DAYS = 3650  # `up` makes a new set at each start; compose and Kubernetes keep theirs until re-made
UP_DIR = "mesh-tls"  # under the cache root: one directory per running `starmesh up`
_LOCAL_NAMES = ("localhost",)
_LOCAL_IPS = ("127.0.0.1", "::1")


def member_files(deployment: str = "starmesh") -> dict[str, bytes]:
    """A new CA and member certificate: MEMBER_FILES' file names -> PEM bytes."""
    ca_key, ca = authority(f"starmesh {deployment} CA")
    key, cert = leaf(f"starmesh {deployment} member", (ca_key, ca),
                     dns_names=(MEMBER_NAME, *_LOCAL_NAMES), ips=_LOCAL_IPS, is_server=True, days=VALID_DAYS)
    return {MEMBER_FILES["ca"]: pem(ca), MEMBER_FILES["cert"]: pem(cert), MEMBER_FILES["key"]: pem(key)}


def write_member_files(directory: "str | Path", files: dict[str, bytes]) -> Path:
    """Writes `files` into `directory` (made 0700), each file 0600 from its first byte."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    for name, data in files.items():
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # a file that was there keeps no wider mode
            f.write(data)
    return directory


def has_member_files(directory: "str | Path") -> bool:
    return all((Path(directory) / name).is_file() for name in MEMBER_FILES.values())


def up_directory(root: Path | None = None) -> Path:
    """A new directory for one `starmesh up`'s member files (its pid in the name); those
    of `up`s that are gone (killed before they could remove theirs) are removed first."""
    parent = (root or cache_root()) / UP_DIR
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for old in parent.glob("up-*"):
        if not _is_alive(old.name.split("-")[1]):
            shutil.rmtree(old, ignore_errors=True)
    return parent / f"up-{os.getpid()}-{secrets.token_hex(4)}"


def _is_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


# --- certificates ----------------------------------------------------------------------


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject, issuer, public_key, days: int):
    from cryptography import x509

    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))


def authority(common_name: str, days: int = VALID_DAYS):
    """(private key, self-signed CA certificate), EC P-256."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)
    cert = (_builder(_name(common_name), _name(common_name), key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def leaf(common_name: str, issuer, dns_names=(), ips=(), is_server: bool = True, days: int = VALID_DAYS):
    """(private key, certificate signed by issuer = (its key, its certificate)): client
    authentication, and server authentication with the subject alternative names."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    issuer_key, issuer_cert = issuer
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if is_server else [])
    builder = (_builder(_name(common_name), issuer_cert.subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    names = [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(issuer_key, hashes.SHA256())


def pem(obj) -> bytes:
    """A certificate or a private key (PKCS#8, unencrypted: read by gRPC at start) as PEM."""
    from cryptography.hazmat.primitives import serialization

    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return obj.public_bytes(serialization.Encoding.PEM)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.mesh_ca",
                                description="Write a new deployment CA and member certificate into DIR "
                                            "(kept when DIR already holds a set).")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--name", default="starmesh", help="the deployment's name, in the certificates' subjects")
    args = p.parse_args(argv)
    if has_member_files(args.directory):
        print(f"{args.directory}: member certificates already there, kept")
        return 0
    try:
        write_member_files(args.directory, member_files(args.name))
    except OSError as e:
        print(f"python -m cluster.mesh_ca: {args.directory}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{args.directory}: member certificates written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
