"""TLS on the client port: the certificate files, the server context, and the handshake's bound."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

# A client that opens a TLS connection and never completes the handshake is
# dropped after this long (asyncio's default is 60 s).
TLS_HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True)
class TlsFiles:
    """The client port's certificate chain and private key (PEM files)."""

    cert: str
    key: str

    def server_context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2+); ssl.SSLError/OSError name a bad file."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context


def server_options(context: ssl.SSLContext | None) -> dict:
    """create_server's (and connect_accepted_socket's) TLS keywords: none without TLS."""
    if context is None:
        return {}
    return {"ssl": context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT}
