"""TLS for every gRPC server and channel of the mesh, from PEM certificate files.

    tls = TlsConfig(cert="mesh.pem", key="mesh.key", ca="ca.pem")   # files read once, here
    server.add_secure_port(address, tls.server_credentials())       # mutual TLS: a CA is given
    channel = aio_channel("127.0.0.1:50061", tls)                   # presents the cert, checks the peer's

One config per process serves both directions: a mesh process's certificate is its
server certificate and its client certificate on the streams it opens (to replicas, to
peers), so it must name every address the process is reached at (IP or DNS SANs) and
allow client authentication. With `ca` a server requires client certificates signed by
it (mutual TLS) and a channel trusts only that CA. No config (None) is plaintext, for
loopback-only setups.

A mesh's members (`starmesh up`, cluster/mesh_ca.py) share one directory of member files
(MEMBER_FILES: the deployment's CA and a member certificate naming MEMBER_NAME):

    tls = member_tls("/path/to/mesh-tls")   # what `--mesh-tls DIR` gives a process

Its channels check the server's certificate against MEMBER_NAME rather than the host
they dial, so a member is reached at any address (a pod IP that DNS membership finds)
and only a certificate of this deployment's CA passes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from core.errors import InvalidArgument

FLAGS = {"cert": "--tls-cert", "key": "--tls-key", "ca": "--tls-ca"}  # the CLI flag of each field
MEMBER_NAME = "starmesh-member"  # the DNS name every member certificate carries
MEMBER_FILES = {"ca": "ca.pem", "cert": "member.pem", "key": "member.key"}  # in a --mesh-tls directory


@dataclass(frozen=True)
class TlsConfig:
    """cert, key: this process's certificate chain and private key (PEM paths), both or
    neither; ca: the CA bundle peers are checked against (PEM path), "" for the system
    roots on channels and no client authentication on servers. Errors name the flag and
    the deployment key (tls.cert, ...) of the bad file. server_name: the name channels
    check a server's certificate against instead of the dialled host ("": the host)."""

    cert: str = ""
    key: str = ""
    ca: str = ""
    server_name: str = ""
    cert_pem: bytes = field(init=False, repr=False, compare=False, default=b"")
    key_pem: bytes = field(init=False, repr=False, compare=False, default=b"")
    ca_pem: bytes = field(init=False, repr=False, compare=False, default=b"")

    def __post_init__(self) -> None:
        for name in FLAGS:
            if not isinstance(getattr(self, name), str):
                raise InvalidArgument(f"{_label(name)} must be a path string, got {getattr(self, name)!r}")
        if bool(self.cert) != bool(self.key):
            missing = "key" if self.cert else "cert"
            raise InvalidArgument(f"{_label(missing)} is missing: --tls-cert and --tls-key go together")
        if not (self.cert or self.ca):
            raise InvalidArgument("TLS needs --tls-cert/--tls-key, --tls-ca or both (no TLS: no config)")
        if not isinstance(self.server_name, str):
            raise InvalidArgument(f"tls server_name must be a string, got {self.server_name!r}")
        for name in FLAGS:
            if getattr(self, name):
                object.__setattr__(self, f"{name}_pem", _read_pem(name, getattr(self, name)))

    @property
    def has_identity(self) -> bool:
        """True when this process can present a certificate (serve TLS, do mutual TLS)."""
        return bool(self.cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        if not self.has_identity:
            raise InvalidArgument("a TLS server needs --tls-cert and --tls-key (only --tls-ca given)")
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)], root_certificates=self.ca_pem or None,
                                           require_client_auth=bool(self.ca_pem))

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem or None,
                                            private_key=self.key_pem or None, certificate_chain=self.cert_pem or None)

    def channel_options(self) -> list[tuple[str, str]]:
        """What a channel adds to its options: the server name it checks (none: the host)."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def cli_args(self) -> list[str]:
        """The flags that give a child process this config (absolute paths)."""
        return [arg for name, flag in FLAGS.items() if getattr(self, name)
                for arg in (flag, str(Path(getattr(self, name)).resolve()))]


def tls_config(cert: str = "", key: str = "", ca: str = "") -> TlsConfig | None:
    """A TlsConfig, or None (plaintext) when no file is given."""
    if not (cert or key or ca):
        return None
    return TlsConfig(cert, key, ca)


def member_tls(directory: "str | Path") -> TlsConfig:
    """The config of a mesh member from its directory of MEMBER_FILES (module docstring);
    InvalidArgument naming --mesh-tls and the file when one is missing or not PEM."""
    paths = {name: str(Path(directory).resolve() / file) for name, file in MEMBER_FILES.items()}
    try:
        return TlsConfig(paths["cert"], paths["key"], paths["ca"], server_name=MEMBER_NAME)
    except InvalidArgument as e:
        raise InvalidArgument(f"--mesh-tls {directory}: {e}") from None


def aio_channel(address: str, tls: TlsConfig | None = None, options=(), interceptors=None) -> grpc.aio.Channel:
    """A grpc.aio channel to `address`: TLS with `tls`, plaintext without."""
    options = list(options)
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=options + tls.channel_options(),
                                   interceptors=interceptors)


def sync_channel(address: str, tls: TlsConfig | None = None, options=()) -> grpc.Channel:
    """A blocking channel to `address`: TLS with `tls`, plaintext without."""
    options = list(options)
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options + tls.channel_options())


def _label(name: str) -> str:
    return f"{FLAGS[name]} (tls.{name})"


def _read_pem(name: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgument(f"{_label(name)} {path}: cannot read: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise InvalidArgument(f"{_label(name)} {path}: not a PEM file (no -----BEGIN line)")
    return data
