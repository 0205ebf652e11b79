"""Opening the directories a 2025-era client's Roots name.

Without confinement, valid client Roots are directories in their own right (the
reference server's rule): each is opened as a new allowed directory, under the
policy given for every directory (``--hide``, ``--read-only``, ...).  With
confinement (``--confine-roots``, or forced by Landlock), a root inside a
command-line directory is opened beneath that directory's descriptor through
the chokepoint, so it cannot be anywhere else; a root containing command-line
directories is narrowed to them; any other root is ignored.  Every URI that
reaches the log is escaped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from urllib.parse import unquote_to_bytes, urlsplit

from sandboxfs.core.allowlist import AllowList, Root, nest_policies
from sandboxfs.core.chokepoint import Confinement, open_root_beneath
from sandboxfs.core.names import has_lone_surrogate, quote_name
from sandboxfs.core.pathnames import normalize_absolute, relative_to
from sandboxfs.core.policy import Policy

log = logging.getLogger("sandboxfs")


def local_path(uri: str) -> str | None:
    """The absolute path of a local ``file://`` URI, or None for anything else.

    Percent-escapes are bytes: the path is those bytes decoded as names read from
    the disk are (:func:`os.fsdecode`), so ``%C3%B1`` is ``ñ`` and ``%E9`` the one
    string for that byte, the same string a listing gives (the policy judges the
    bytes the kernel is given)."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    if has_lone_surrogate(parts.path):  # no bytes stand for it: not a path at all
        return None
    raw = unquote_to_bytes(parts.path)
    if not raw.startswith(b"/") or b"\0" in raw:
        return None
    return normalize_absolute(os.fsdecode(raw))


def roots_from_uris(
    uris: Sequence[str],
    cli: AllowList,
    *,
    confine: bool,
    confinement: Confinement,
    policy: Policy,
) -> list[Root]:
    """Open the directories a client's Roots name (blocking: run it in a worker thread).

    Unconfined, each carries ``policy``; confined, each keeps the policy of the
    allowed directory it lies in.  Each problem with a root is logged and the root
    skipped.
    """
    roots: list[Root] = []
    for uri in uris:
        shown = quote_name(uri)
        given = local_path(uri)
        if given is None:
            log.warning("Skipping client root that is not a local file:// URI: %s", shown)
            continue
        try:
            real = os.path.realpath(given, strict=True)
            if not os.path.isdir(real):
                log.warning("Skipping client root that is not a directory: %s", shown)
                continue
            if not confine:
                roots.append(Root.open(given, policy))
                continue
            inside = cli.map(real)
            if inside is not None:
                roots.append(open_root_beneath(inside[0], inside[1], confinement, real, given))
                continue
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            log.warning("Skipping client root that cannot be opened: %s (%s)", shown, reason)
            continue
        narrowed = [r for r in cli.roots if relative_to(r.path, real) is not None]
        if narrowed:
            log.info("Client root %s narrowed to the command-line directories inside it", shown)
            roots.extend(narrowed)
        else:
            log.warning("Ignoring client root outside the command-line directories: %s", shown)
    unique: list[Root] = []
    for root in roots:
        if all(root is not kept for kept in unique):
            unique.append(root)
    if not confine:  # directories in their own right, which may nest
        nest_policies(unique)
    return unique
