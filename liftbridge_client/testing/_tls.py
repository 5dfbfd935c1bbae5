"""TLS for test servers: a throwaway PKI made with the openssl CLI, and server settings.

`make_pki` writes a CA, a server certificate for 127.0.0.1/localhost and a client
certificate (CN ``liftbridge-test-client``) into a directory. `ServerTLS` turns them into
Liftbridge config keys, and gives the harness the credentials its readiness probe needs.
Nothing here is meant for production keys.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import grpc

from liftbridge_client.testing._config import StrPath
from liftbridge_client.testing._errors import HarnessError

__all__ = ["ServerTLS", "TestPKI", "make_pki"]

CLIENT_CN = "liftbridge-test-client"


@dataclass(frozen=True)
class TestPKI:
    """Paths of a CA and of a server and a client certificate signed by it."""

    __test__ = False  # not a pytest test class, despite the name

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@dataclass(frozen=True)
class ServerTLS:
    """gRPC TLS for a node; ``client_auth`` also demands a client certificate (mutual TLS).

    Authorization keys are never written: v1.9.0 turns authorization ON when
    ``tls.client.authz.enabled: false`` is written together with client auth.
    """

    pki: TestPKI
    client_auth: bool = False

    def settings(self) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {
            "tls.cert": str(self.pki.server_cert),
            "tls.key": str(self.pki.server_key),
        }
        if self.client_auth:
            out["tls.client.auth.enabled"] = True
            out["tls.client.auth.ca"] = str(self.pki.ca_cert)
        return out

    def probe_credentials(self) -> grpc.ChannelCredentials:
        """What the harness's own readiness probe presents."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.pki.ca_cert.read_bytes(),
            private_key=self.pki.client_key.read_bytes() if self.client_auth else None,
            certificate_chain=self.pki.client_cert.read_bytes() if self.client_auth else None,
        )


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise HarnessError("the openssl command is needed to make test certificates")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def make_pki(directory: StrPath, *, days: int = 2) -> TestPKI:
    """Write a CA, a server (127.0.0.1, localhost) and a client certificate into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", str(days),
             "-subj", "/CN=liftbridge-test-ca", cwd=d)  # fmt: skip
    for name, cn, ext in (
        ("server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth\n"),
        ("client", CLIENT_CN, "extendedKeyUsage=clientAuth\n"),
    ):  # fmt: skip
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days),
                 "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return TestPKI(
        ca_cert=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
    )
