"""TLS on the client port, driven by real TLS clients: Python's ssl and `openssl s_client`."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import urllib.request

import pytest

from tests.support.hostile import check_flood_is_contained
from tests.support.servers import HOST, RawConn, free_port, haqueue

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl (scripts/setup)")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=haqueue-test",
         "-addext", f"subjectAltName=IP:{HOST}"],
        check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def tls_server(certificate):
    cert, key = certificate
    with haqueue("--tls-cert", str(cert), "--tls-key", str(key)) as srv:
        yield srv


def client_context(cert) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert))
    return context


class TlsConn(RawConn):
    """RawConn over TLS, verifying the server's certificate."""

    context: ssl.SSLContext

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        plain = socket.create_connection((host, port), timeout=timeout)
        self.sock = self.context.wrap_socket(plain, server_hostname=host)
        self.timeout = timeout
        self.buf = bytearray()
        self.closed_by_peer = False


def tls_connector(cert):
    return type("Conn", (TlsConn,), {"context": client_context(cert)})


def test_python_ssl_client_puts_reserves_and_deletes(tls_server, certificate):
    connect = tls_connector(certificate[0])
    with connect(tls_server.host, tls_server.port) as conn:
        assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
        conn.send(b"put 0 0 60 5\r\nhello\r\n")
        job_id = conn.recv_reply().split()[1]
        conn.send(b"reserve-with-timeout 1\r\n")
        assert conn.recv_reply() == b"RESERVED " + job_id + b" 5\r\nhello\r\n"
        conn.send(b"delete " + job_id + b"\r\nstats\r\n")
        replies = conn.recv_replies(2)
        assert replies[0] == b"DELETED\r\n"
        assert b"\nhaqueue-tls: true\n" in replies[1]


def test_openssl_s_client_puts_reserves_and_deletes(tls_server, certificate):
    # -crlf turns each typed newline into CRLF, as beanstalkd's protocol wants;
    # -quiet implies -ign_eof: it reads until the server closes after `quit`.
    script = b"put 0 0 60 2\nhi\nreserve-with-timeout 1\ndelete 1\nquit\n"
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"{tls_server.host}:{tls_server.port}", "-crlf", "-quiet",
         "-CAfile", str(certificate[0]), "-verify_return_error", "-verify_ip", tls_server.host],
        input=script, capture_output=True, timeout=30)
    assert result.stdout == b"INSERTED 1\r\nRESERVED 1 2\r\nhi\r\nDELETED\r\n", result.stderr


def test_a_plain_client_on_the_tls_port_gets_a_clean_close(tls_server, certificate):
    with RawConn(tls_server.host, tls_server.port) as plain:
        plain.send(b"put 0 0 60 5\r\nhello\r\n")
        received = plain.wait_closed(timeout=5)
    # At most a TLS alert record (content type 21), never a beanstalk reply.
    assert received == b"" or received[:1] == b"\x15", received
    connect = tls_connector(certificate[0])
    with connect(tls_server.host, tls_server.port) as conn:  # and the node serves on
        conn.send(b"put 0 0 60 1\r\nx\r\n")
        assert conn.recv_reply().startswith(b"INSERTED ")
    with connect(tls_server.host, tls_server.port) as conn:
        conn.send(b"stats-tube default\r\n")
        assert b"total-jobs: 1\n" in conn.recv_reply()


def test_a_tls_client_that_never_reads_is_contained_too(tls_server, certificate):
    cert = certificate[0]
    report = check_flood_is_contained(tls_server.host, tls_server.port, tls_server.pid,
                                      tls=client_context(cert), connect=tls_connector(cert))
    print(report.summary())


def test_a_missing_key_file_is_one_line(certificate, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "haqueue", "serve", "-p", "0", "--tls-cert", str(certificate[0]),
         "--tls-key", str(tmp_path / "nope.pem")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "nope.pem" in result.stderr, result.stderr


def test_tls_cert_without_key_is_one_line(certificate):
    result = subprocess.run(
        [sys.executable, "-m", "haqueue", "serve", "-p", "0", "--tls-cert", str(certificate[0])],
        capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == "haqueue: --tls-cert and --tls-key go together"


def test_the_admin_token_guards_status_cluster_metrics_and_gc_but_not_the_health_checks():
    admin_port = free_port()
    with haqueue("--admin", f"{HOST}:{admin_port}", "--admin-token", "s3cret"):
        base = f"http://{HOST}:{admin_port}"

        def get(path: str, token: str | None = None) -> int:
            request = urllib.request.Request(base + path)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert get("/status") == 401
        assert get("/status", "wrong") == 401
        assert get("/status", "s3cret") == 200
        assert get("/gc") == 401
        for path in ("/cluster", "/metrics"):  # the cluster's shape and its tubes' names
            assert get(path) == 401
            assert get(path, "wrong") == 401
            assert get(path, "s3cret") == 200
        assert get("/health") == 200
        assert get("/leader") == 200
        assert get("/") == 200  # the page itself holds no data: it asks for the token
