"""Asking a node's HTTP admin endpoint, with short timeouts (checks run often)."""

from __future__ import annotations

import http.client
import json
import socket


def get(host: str, port: int, path: str, timeout: float = 0.5,
        token: str | None = None) -> tuple[int, bytes]:
    """(status, body); raises OSError when the node cannot be reached."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as exc:
        raise OSError(f"bad HTTP answer: {exc}") from None
    finally:
        conn.close()


def status(host: str, port: int, timeout: float = 0.5, digest: bool = False,
           token: str | None = None) -> dict:
    code, body = get(host, port, "/status?digest=1" if digest else "/status", timeout, token)
    if code != 200:
        raise OSError(f"/status answered {code}")
    return json.loads(body)


def is_leader(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        code, _ = get(host, port, "/leader", timeout)
    except OSError:
        return False
    return code == 200


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
