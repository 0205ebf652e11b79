"""The tenants file of ``sandboxfs --tenants FILE``: who may connect, and what each is served.

TOML, read with :mod:`tomllib`::

    [[tenant]]
    name = "alice"                       # letters, digits, '.', '_', '-'
    token_sha256 = "<64 hex digits>"     # sha256 of the bearer token (sandboxfs hash-token)
    directories = ["/srv/alice", "/srv/shared:ro"]
    hide = ["*.log"]                     # optional, like --hide
    protect = [".git"]                   # optional, like --protect
    preset = "secrets"                   # optional, a name or a list, like --preset
    policy = "/etc/sandboxfs/alice.toml" # optional, like --policy FILE
    workspaces = "/srv/workspaces/alice" # optional, like --workspaces BASE
    read_only = false                    # optional, like --read-only
    audit_log = "/var/log/sandboxfs/alice.jsonl"  # optional, like --audit-log
    journal = "/var/lib/sandboxfs/journal/alice"  # optional, like --journal (one per tenant)
    ask = ["*.cfg"]                      # optional, like --ask

A token is never stored, only its SHA-256; a presented token is hashed and
compared against every tenant's hash in constant time (an empty one is never
compared: it authenticates nobody).  Every problem (an unknown key, a duplicate
name or token hash, a tenant without directories, a hash that is not 64 hex
digits, the hash of the empty string, the hash of a well-known test token unless
weak tokens are accepted for tests, a value of the wrong type) is a
:class:`TenantsError` whose message names it, in one line.

This module only reads the file: it never opens a tenant's directories (the
tenant's own worker process does, see :mod:`sandboxfs.transports.workers`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.transports.credentials import hash_weakness

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_HEX: Final = re.compile(r"[0-9a-f]{64}", re.ASCII)
_KEYS: Final = frozenset(
    {
        "name",
        "token_sha256",
        "directories",
        "hide",
        "protect",
        "preset",
        "policy",
        "workspaces",
        "read_only",
        "audit_log",
        "journal",
        "ask",
    }
)


@final
class TenantsError(Exception):
    """The tenants file cannot be used; the message names the one problem.
    ``readable`` is False when the file could not even be read."""

    def __init__(self, message: str, *, readable: bool = True) -> None:
        super().__init__(message)
        self.readable = readable


def hash_token(token: str) -> str:
    """The ``token_sha256`` of a bearer token (surrounding whitespace is not part of it,
    as with ``--token-file``)."""
    return hashlib.sha256(token.strip().encode()).hexdigest()


@final
@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant: its credential's hash and the command line of its worker."""

    name: str
    token_sha256: str
    directories: tuple[str, ...]
    hide: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    policy: str | None = None
    workspaces: str | None = None
    read_only: bool = False
    audit_log: str | None = None
    #: The tenant's own change journal (``--journal``): never shared with another tenant.
    journal: str | None = None
    ask: tuple[str, ...] = ()

    def options(self) -> list[str]:
        """The worker's own options and directories, as sandboxfs argv (after ``--``
        come only directories, so no directory can be taken for an option)."""
        argv: list[str] = []
        if self.read_only:
            argv.append("--read-only")
        for pattern in self.hide:
            argv += ["--hide", pattern]
        for pattern in self.protect:
            argv += ["--protect", pattern]
        for preset in self.presets:
            argv += ["--preset", preset]
        if self.policy is not None:
            argv += ["--policy", self.policy]
        if self.workspaces is not None:
            argv += ["--workspaces", self.workspaces]
        if self.audit_log is not None:
            argv += ["--audit-log", self.audit_log]
        if self.journal is not None:
            argv += ["--journal", self.journal]
        for pattern in self.ask:
            argv += ["--ask", pattern]
        return [*argv, "--", *self.directories]


@final
@dataclass(frozen=True, slots=True)
class Tenants:
    """Every tenant of a tenants file, by name."""

    by_name: Mapping[str, Tenant]
    #: Whether the hashes of well-known test tokens were accepted (for tests):
    #: a reload reads the file again under the same rule.
    allow_weak: bool = False

    def authenticate(self, presented: str) -> Tenant | None:
        """The tenant whose token this is, or None (always for an empty token).  Every
        stored hash is compared (in constant time), whichever matches."""
        presented = presented.strip()
        if not presented:
            return None
        digest = hashlib.sha256(presented.encode()).digest()
        found = None
        for tenant in self.by_name.values():
            if hmac.compare_digest(digest, bytes.fromhex(tenant.token_sha256)):
                found = tenant
        return found


def load_tenants(path: str, *, allow_weak: bool = False) -> Tenants:
    """Read and check a tenants file (``allow_weak``: accept the hashes of well-known
    test tokens, for tests).  Raises TenantsError (also for a file that cannot be
    read or is not TOML), naming the problem."""
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise TenantsError(
            f"cannot read --tenants {path}: {exc.strerror}", readable=False
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise TenantsError(f"--tenants {path} is not valid TOML: {exc}") from None
    return parse_tenants(document, path, allow_weak=allow_weak)


def parse_tenants(document: Mapping[str, Any], path: str, *, allow_weak: bool = False) -> Tenants:
    """Check a parsed tenants file (``path`` only names it in messages)."""
    unknown = sorted(set(document) - {"tenant"})
    if unknown:
        raise TenantsError(f"--tenants {path}: unknown key {unknown[0]!r} (expected [[tenant]])")
    entries = document.get("tenant")
    if not isinstance(entries, list) or not entries:
        raise TenantsError(f"--tenants {path}: no [[tenant]] table")
    by_name: dict[str, Tenant] = {}
    hashes: dict[str, str] = {}
    journals: dict[str, str] = {}
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise TenantsError(f"--tenants {path}: tenant {number} is not a table")
        tenant = _tenant(entry, f"--tenants {path}: tenant {number}", allow_weak=allow_weak)
        where = f"--tenants {path}: tenant {tenant.name!r}"
        if tenant.name in by_name:
            raise TenantsError(f"{where} appears twice")
        if tenant.token_sha256 in hashes:
            raise TenantsError(
                f"{where} has the same token_sha256 as tenant {hashes[tenant.token_sha256]!r}"
            )
        if tenant.journal is not None:
            journal = os.path.realpath(tenant.journal)
            if journal in journals:
                raise TenantsError(
                    f"{where} has the same journal as tenant {journals[journal]!r}: each tenant "
                    "needs a journal of its own"
                )
            journals[journal] = tenant.name
        by_name[tenant.name] = tenant
        hashes[tenant.token_sha256] = tenant.name
    return Tenants(by_name, allow_weak=allow_weak)


def _tenant(entry: Mapping[str, Any], where: str, *, allow_weak: bool) -> Tenant:
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise TenantsError(f"{where}: unknown key {unknown[0]!r}")
    name = entry.get("name")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise TenantsError(
            f"{where}: 'name' must be 1 to 64 letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )
    where = f"{where} ({name!r})"
    digest = entry.get("token_sha256")
    if not isinstance(digest, str) or _HEX.fullmatch(digest.lower()) is None:
        raise TenantsError(
            f"{where}: 'token_sha256' must be 64 hex digits (make it with "
            "'sandboxfs hash-token TOKEN_FILE')"
        )
    weakness = hash_weakness(digest.lower())
    if weakness is not None and not (allow_weak and weakness[1]):
        reason, _ = weakness
        raise TenantsError(
            f"{where}: 'token_sha256' {reason}; give the tenant a strong token "
            "('openssl rand -hex 32', then 'sandboxfs hash-token TOKEN_FILE')"
        )
    directories = _strings(entry, "directories", where)
    policy = _optional_string(entry, "policy", where)
    workspaces = _optional_string(entry, "workspaces", where)
    if not directories and policy is None and workspaces is None:
        raise TenantsError(
            f"{where}: no 'directories' (give a list of directories, 'policy' or 'workspaces')"
        )
    if any(not directory for directory in directories):
        raise TenantsError(f"{where}: an empty string is no directory")
    preset = entry.get("preset", [])
    presets = _strings({"preset": [preset] if isinstance(preset, str) else preset}, "preset", where)
    read_only = entry.get("read_only", False)
    if not isinstance(read_only, bool):
        raise TenantsError(f"{where}: 'read_only' must be true or false")
    return Tenant(
        name=name,
        token_sha256=digest.lower(),
        directories=directories,
        hide=_strings(entry, "hide", where),
        protect=_strings(entry, "protect", where),
        presets=presets,
        policy=policy,
        workspaces=workspaces,
        read_only=read_only,
        audit_log=_optional_string(entry, "audit_log", where),
        journal=_optional_string(entry, "journal", where),
        ask=_strings(entry, "ask", where),
    )


def _strings(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TenantsError(f"{where}: {key!r} must be a list of strings")
    return tuple(value)


def _optional_string(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise TenantsError(f"{where}: {key!r} must be a non-empty string")
    return value


def changed(old: Tenant, new: Tenant) -> bool:
    """Whether ``new`` needs another worker than ``old`` (anything but the token)."""
    return old.options() != new.options()
