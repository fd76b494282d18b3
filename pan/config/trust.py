"""What a workflow's processes prove and whom they believe: its secret, its allowed hosts, its TLS files.

One value per process, made from the workflow by ``Trust.of`` and handed to
the workers it runs, so that a worker needs no other knowledge of how the
workflow is secured. All three are optional; ``Trust()`` is the open network.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from pan.config.specs import Workflow
from pan.security.auth import Credentials
from pan.security.tls import TlsFiles


@dataclass(frozen=True)
class Trust:
    credentials: Credentials | None = None
    allowed_hosts: frozenset[str] | None = None
    tls: TlsFiles | None = None
    _servers: dict[str, ssl.SSLContext] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, workflow: Workflow) -> Trust:
        """The workflow's trust, with its secret and CA loaded (``AuthError``, ``TlsError`` say what is wrong)."""
        trust = cls(None if workflow.auth is None else workflow.auth.load(), workflow.allowed_hosts, workflow.tls)
        trust.client_tls()  # the CA must load before anything starts
        return trust

    @property
    def token(self) -> str | None:
        """The read token to show, if the workflow has a secret."""
        return None if self.credentials is None else self.credentials.read_token

    def client_tls(self) -> ssl.SSLContext | None:
        """What clients verify servers with (None: plain HTTP)."""
        return None if self.tls is None else self.tls.client_context()

    def server_tls(self, host: str) -> ssl.SSLContext | None:
        """What a server on ``host`` presents (None: plain HTTP); loaded once per host."""
        if self.tls is None:
            return None
        if host not in self._servers:
            self._servers[host] = self.tls.server_context(host)
        return self._servers[host]


OPEN = Trust()
