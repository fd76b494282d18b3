"""Addresses: whether a host is safe to put into a URL (``is_host``), and free ports for tests and launch scripts."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections import deque

MAX_HOST_CHARS = 253  # the longest DNS name
_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def is_host(text: str) -> bool:
    """Whether ``text`` is an IP address or a DNS name, and nothing else.

    No port, path, query, fragment, userinfo, spaces or IPv6 zone, so that a
    URL built from it cannot point anywhere but that host.  The last label of
    a name is not all digits (``2130706433`` is not a name but an IPv4 in
    disguise).
    """
    if not text or len(text) > MAX_HOST_CHARS or not text.isascii():
        return False
    if "%" not in text:
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(text)
            return True
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    return all(_DNS_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def url_host(host: str) -> str:
    """``host`` as it goes into a URL: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host


#: Ports this process handed out lately. The kernel may give a port that was just released to the next
#: bind, so two calls in a row (a worker's port, then its ingest port) could return the same one.
_RECENT_PORTS: deque[int] = deque(maxlen=4096)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for tests and launch scripts)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports that were free a moment ago, all different, and none handed out lately by this process:
    they are held together while chosen."""
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        while len(chosen) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))  # held until all are chosen, so the kernel gives a new one each time
            port = int(sock.getsockname()[1])
            if port not in _RECENT_PORTS:
                chosen.append(port)
        _RECENT_PORTS.extend(chosen)
        return chosen
