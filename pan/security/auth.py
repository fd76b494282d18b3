"""Who may change a repository and who may read streams: one secret shared by a workflow's peers.

Without a secret PAN is open, as before. A workflow that names one (``auth``:
a file or an environment variable, never the secret itself) closes both planes:

- **control plane:** ``/publish`` and ``/unpublish`` must be signed: HMAC-SHA256
  over the method, path, query, body and the sender's wall-clock time. An
  unsigned request gets 401; a wrong, stale (beyond ``SIGNATURE_WINDOW_MS``)
  or already used signature gets 403, so neither a forger nor someone who
  captured a request can register or remove a publisher;
- **data plane:** every other route but ``/health`` needs
  ``Authorization: Bearer <read token>``. The read token is derived from the
  secret, so it can be handed to readers (``pan token``) who must not publish.

Signatures use wall-clock time because peers run on different machines; the
window allows for their clocks' skew.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

MIN_SECRET_BYTES = 16
SIGNATURE_WINDOW_MS = 30_000  # how far a signature's time may be from the receiver's clock, either way
TIME_HEADER = "X-PAN-Time"
SIGNATURE_HEADER = "X-PAN-Signature"
AUTHORIZATION = "Authorization"
_READ_LABEL = b"pan read token v1"
_MAX_REMEMBERED = 200_000  # signatures kept to refuse a replay; beyond this many in one window, refuse new ones


class AuthError(Exception):
    """A secret that cannot be loaded, or a request that is not allowed (``status``: 401 or 403)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class SecretSource:
    """Where a workflow's secret lives: a file (relative paths from the workflow's folder) or an env variable."""

    file: Path | None = None
    env: str | None = None

    def describe(self) -> str:
        return f"secret file {self.file}" if self.file is not None else f"environment variable {self.env}"

    def load(self) -> Credentials:
        """The credentials, or ``AuthError`` saying what is wrong with the secret (never the secret)."""
        if self.file is not None:
            try:
                raw = self.file.read_bytes()
            except OSError as exc:
                raise AuthError(f"{self.describe()}: {exc.strerror or exc}") from None
        else:
            assert self.env is not None
            value = os.environ.get(self.env)
            if value is None:
                raise AuthError(f"{self.describe()} is not set")
            raw = value.encode()
        secret = raw.strip()
        if len(secret) < MIN_SECRET_BYTES:
            raise AuthError(f"{self.describe()}: the secret has {len(secret)} bytes, at least {MIN_SECRET_BYTES} "
                            "are needed (e.g. `head -c 32 /dev/urandom | base64 > pan.secret`)")
        return Credentials(secret)


def _message(method: str, path: str, query: Iterable[tuple[str, str]], body: bytes, t_ms: int) -> bytes:
    """What a signature covers: every part of the request that decides what it does, and its time."""
    return b"\n".join([
        method.upper().encode(), path.encode(), orjson.dumps(sorted(query)), hashlib.sha256(body).hexdigest().encode(),
        str(t_ms).encode(),
    ])


class Credentials:
    """A workflow's secret: signs control requests and derives the read token."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self.read_token = hmac.new(secret, _READ_LABEL, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:  # never the secret, in logs or tracebacks
        return "Credentials(<secret>)"

    def signature(self, method: str, path: str, query: Iterable[tuple[str, str]], body: bytes, t_ms: int) -> str:
        return hmac.new(self._secret, _message(method, path, query, body, t_ms), hashlib.sha256).hexdigest()

    def signed_headers(self, method: str, path: str, query: Mapping[str, str] | None = None, body: bytes = b"",
                       now_ms: int | None = None) -> dict[str, str]:
        """The headers that sign this request, as of now."""
        t_ms = int(time.time() * 1000) if now_ms is None else now_ms
        signature = self.signature(method, path, (query or {}).items(), body, t_ms)
        return {TIME_HEADER: str(t_ms), SIGNATURE_HEADER: signature}


def bearer(token: str | None) -> dict[str, str]:
    """The header that shows a read token (none without one)."""
    return {} if token is None else {AUTHORIZATION: f"Bearer {token}"}


class Gate:
    """A server's checks: the read token on reads, a fresh, unused signature on control requests."""

    def __init__(self, credentials: Credentials, *, signed_paths: frozenset[str] = frozenset(),
                 open_paths: frozenset[str] = frozenset({"/health"}),
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.credentials = credentials
        self.signed_paths = signed_paths
        self.open_paths = open_paths
        self._clock_ms = clock_ms
        self._used: OrderedDict[str, int] = OrderedDict()  # signature -> its time, oldest first
        self.refused: dict[str, int] = {}  # reason -> count

    def check(self, method: str, path: str, query: Iterable[tuple[str, str]], body: bytes,
              headers: Mapping[str, str]) -> None:
        """Return if the request may go on, else ``AuthError``."""
        if path in self.open_paths:
            return
        if path in self.signed_paths:
            self._check_signature(method, path, list(query), body, headers)
        else:
            self._check_token(headers.get(AUTHORIZATION))

    def _refuse(self, reason: str, message: str, status: int = 403) -> AuthError:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        return AuthError(message, status)

    def _check_token(self, header: str | None) -> None:
        if header is None:
            raise self._refuse("no_token", "a read token is needed (Authorization: Bearer TOKEN; see `pan token`)",
                               401)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                 self.credentials.read_token.encode()):
            raise self._refuse("bad_token", "the read token is not valid here")

    def _check_signature(self, method: str, path: str, query: list[tuple[str, str]], body: bytes,
                         headers: Mapping[str, str]) -> None:
        raw_time, signature = headers.get(TIME_HEADER), headers.get(SIGNATURE_HEADER)
        if raw_time is None or signature is None:
            raise self._refuse("unsigned", f"{path} must be signed with the workflow's secret "
                                           f"({TIME_HEADER} and {SIGNATURE_HEADER} headers)", 401)
        if not raw_time.isascii() or not raw_time.isdigit() or len(raw_time) > 15:
            raise self._refuse("bad_signature", f"{TIME_HEADER} must be milliseconds since the epoch")
        t_ms = int(raw_time)
        now = self._clock_ms()
        if abs(now - t_ms) > SIGNATURE_WINDOW_MS:
            raise self._refuse("stale", f"the signature's time is {abs(now - t_ms) / 1000:.0f} s from this server's "
                                        f"clock (at most {SIGNATURE_WINDOW_MS / 1000:.0f} s are allowed)")
        expected = self.credentials.signature(method, path, query, body, t_ms)
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            raise self._refuse("bad_signature", "the signature does not match the request")
        self._forget_before(now - SIGNATURE_WINDOW_MS)
        if signature in self._used:
            raise self._refuse("replayed", "this signed request was already used")
        if len(self._used) >= _MAX_REMEMBERED:
            raise self._refuse("busy", "too many signed requests in one window; try again", 429)
        self._used[signature] = t_ms

    def _forget_before(self, oldest_ms: int) -> None:
        """Signatures older than the window cannot be replayed anyway (they are stale)."""
        used = self._used
        while used:
            if next(iter(used.values())) >= oldest_ms:
                break
            used.popitem(last=False)
