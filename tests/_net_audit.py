"""pytest plugin: fail any test whose process opens a connection to an address other than
loopback (``socket.connect`` audit events; Python sockets only - obstore's Rust client is
not seen here, see tests/test_hostile_no_network.py for how that one is checked).

Activate with ``pytest_plugins = ["_net_audit"]`` in a test module (or in conftest.py for the
whole suite).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

_seen: list[str] = []
_lock = threading.Lock()


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name: resolving it is a request of its own


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect":
        return
    sock, address = args[0], args[1]
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0] if isinstance(address, tuple) and address else str(address)
    if not _is_loopback(str(host)):
        with _lock:
            _seen.append(f"{host}:{address[1] if isinstance(address, tuple) and len(address) > 1 else '?'}")


sys.addaudithook(_hook)


def non_loopback_connections() -> list[str]:
    """Connections to non-loopback addresses seen so far in this process."""
    with _lock:
        return list(_seen)


@pytest.fixture(autouse=True)
def _no_connection_leaves_loopback() -> Iterator[None]:
    before = len(non_loopback_connections())
    yield
    new = non_loopback_connections()[before:]
    if new:
        pytest.fail(f"the test connected to non-loopback addresses: {new}")
