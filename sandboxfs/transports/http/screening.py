"""What an HTTP request must be before its message is read: sent to a Host this
server answers to, from an Origin it accepts (against DNS rebinding), with a
body within the cap.

:class:`HttpPolicy` holds the exact Hosts and Origins (the single server and the
tenants' front check the same one); :func:`misdirected` is the answer to a Host
that is refused (421), which names the Host received, escaped, and the
``--allowed-host`` that would accept it.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

log = logging.getLogger("sandboxfs")

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


@final
@dataclass(frozen=True)
class HttpPolicy:
    """What the endpoint accepts before it reads a message."""

    #: Host headers answered to, exactly; None accepts any (a unix socket).
    hosts: frozenset[str] | None
    #: Origins allowed besides loopback pages.
    origins: frozenset[str]
    max_body: int
    #: Never stream: answer JSON even to a request that asks for progress.
    json_only: bool = False

    @classmethod
    def for_endpoint(
        cls,
        host: str | None,
        port: int | None,
        *,
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str],
        max_body: int,
        json_only: bool,
    ) -> HttpPolicy:
        if host is None or port is None:
            hosts = None
        else:
            shown = f"[{host}]" if ":" in host else host
            names = {*LOOPBACK_NAMES, shown.lower()}
            served = {f"{name}:{port}" for name in names}
            if port == 80:  # the default port: a client may leave it out
                served |= names
            hosts = frozenset(served | {name.lower() for name in allowed_hosts})
        origins = frozenset(origin.lower() for origin in allowed_origins)
        return cls(hosts, origins, max_body, json_only)

    def host_ok(self, given: Sequence[str]) -> bool:
        """One ``Host`` header, compared whole and exactly (names without regard to
        case): no prefix, no suffix, the port included."""
        if len(given) > 1:
            return False
        return self.hosts is None or (bool(given) and given[0].lower() in self.hosts)

    def origin_ok(self, given: Sequence[str]) -> bool:
        """No Origin (not a browser), an allowed one, or a page on this machine's
        loopback (any port: it is local software, not a rebound name).  The whole
        header is compared: ``http://127.0.0.1:80.evil.com`` is not loopback.  A
        repeated Origin is refused."""
        if len(given) != 1:
            return not given
        origin = given[0].lower()
        return origin in self.origins or _LOOPBACK_ORIGIN.fullmatch(origin) is not None


#: The most characters of a refused Host repeated in the answer and the log.
_SHOWN_HOST: Final = 200
#: Distinct refused Hosts logged (each once); past that, refusals are not logged.
_LOGGED_HOSTS: Final = 64
_logged_hosts: set[str] = set()
#: Sent with every plain-text answer: it may repeat client text, never as markup.
NOSNIFF: Final = (b"x-content-type-options", b"nosniff")


def misdirected(given: Sequence[str]) -> bytes:
    """The body of a 421: the Host received (escaped: it is client text) and the
    option that makes the server answer to it.  The first refusal of each Host is
    logged, for the operator (a ``docker run -p 9090:8080`` meets this at once)."""
    if len(given) > 1:
        return b"Misdirected request: more than one Host header\n"
    if not given or not given[0]:
        return b"Misdirected request: no Host header; send the host and port you connect to\n"
    shown = shlex.quote(_escaped(given[0]))
    if shown not in _logged_hosts and len(_logged_hosts) < _LOGGED_HOSTS:
        _logged_hosts.add(shown)
        log.warning(
            "refused Host %s (421); if clients reach this server by that name, start it "
            "with --allowed-host %s",
            shown,
            shown,
        )
    return (
        f"Misdirected request: this server does not answer to Host {shown}; if you reach it "
        f"by that name, start it with --allowed-host {shown}\n"
    ).encode()


def _escaped(text: str) -> str:
    """Client text shown safely: printable ASCII as it is, anything else as \\xNN,
    at most :data:`_SHOWN_HOST` characters."""
    cut = text[:_SHOWN_HOST]
    shown = "".join(c if " " < c <= "~" and c != "\\" else f"\\x{ord(c):02x}" for c in cut)
    return shown + ("..." if len(text) > _SHOWN_HOST else "")


#: A loopback origin as a browser serializes it: scheme, host and an optional port.
_LOOPBACK_ORIGIN: Final = re.compile(
    r"https?://(?:127\.0\.0\.1|localhost|\[::1\])(?::[0-9]{1,5})?", re.ASCII
)
