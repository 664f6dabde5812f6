"""Names of the partition namespaces and table directories writes create.

A partition namespace's name is a 16-character ``a-z0-9`` string that never contains a partition
value. It is a keyed hash of the spec id and the key prefix under the namespace's naming key
(table metadata ``dlp.naming_key``, random, made at creation): writers racing to create the same
partition namespace (parallel runs of one backfill, sharing a date level) choose the same name,
so the loser's tables are registered where they were written instead of being copied; without
the key the names cannot be told from random ones, nor the values recovered from them.
Namespaces created before the key existed get one on their first write.

Table directories stay ``<8 hex>_<object id>`` with a random prefix (two writers never share
a directory), or, for a distributed write whose workers must agree without talking, one
derived from the write's id."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Protocol

from .commit_summary import CommitSummary, Operation
from .edit import ManifestEdit
from .layout import random_name, table_location
from .snapshot import ManifestSnapshot
from .store import ManifestStore

NAMING_KEY = "dlp.naming_key"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

Key = tuple[Any, ...]


def new_naming_key() -> str:
    """A fresh naming key (32 hex digits)."""
    return secrets.token_hex(16)


def _name(digest: bytes) -> str:
    n = int.from_bytes(digest, "big")
    chars = []
    for _ in range(16):
        n, r = divmod(n, 36)
        chars.append(_ALPHABET[r])
    return "".join(chars)


def keyed_name(key: str, spec_id: int, prefix: Key) -> str:
    """The name of the partition namespace of key ``prefix`` under spec ``spec_id``."""
    digest = hashlib.blake2b(
        repr((spec_id, *prefix)).encode(), key=bytes.fromhex(key), digest_size=16
    )
    return _name(digest.digest())


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).digest()


def derived_name(seed: str, prefix: Key) -> str:
    """A 16-character ``a-z0-9`` name, the same wherever ``seed`` and ``prefix`` are."""
    return _name(_digest(seed, "ns", repr(prefix)))


def derived_location(seed: str, key: Key, object_id: str) -> str:
    """``<8 hex>_<object_id>`` for a new partition table, the same wherever ``seed`` is."""
    return f"{_digest(seed, 'table', repr(key)).hex()[:8]}_{object_id}"


class Naming(Protocol):
    """How a write names the partition namespaces and table directories it creates."""

    def namespace_name(self, prefix: Key) -> str:
        """The name of the partition namespace of key prefix ``prefix``."""
        ...

    def table_location(self, object_id: str, key: Key) -> str:
        """The directory of the new partition table ``object_id`` of key ``key``."""
        ...


class NamespaceNaming:
    """Namespace names from the naming ``key`` (else derived from ``seed``, else random, one per
    prefix); table directories derived from ``seed`` (the workers of one distributed write
    agree), else random."""

    def __init__(self, key: str | None, spec_id: int, seed: str | None = None) -> None:
        self.key = key
        self.spec_id = spec_id
        self.seed = seed
        self._names: dict[Key, str] = {}

    @classmethod
    def of(cls, snap: ManifestSnapshot, spec_id: int, seed: str | None = None) -> NamespaceNaming:
        """The naming of a write planned on ``snap``."""
        return cls(snap.metadata.get(NAMING_KEY), spec_id, seed)

    def namespace_name(self, prefix: Key) -> str:
        if self.key is not None:
            return keyed_name(self.key, self.spec_id, prefix)
        if self.seed is not None:
            return derived_name(self.seed, (self.spec_id, *prefix))
        return self._names.setdefault(prefix, random_name())

    def table_location(self, object_id: str, key: Key) -> str:
        if self.seed is not None:
            return derived_location(self.seed, (self.spec_id, *key), object_id)
        return table_location(object_id)


def ensure_naming_key(store: ManifestStore, snap: ManifestSnapshot) -> bool:
    """Give a namespace created before naming keys its key (one metadata commit; of racing
    writers one sets it, the others find it). Whether a commit was made."""
    if NAMING_KEY in snap.metadata:
        return False
    key = new_naming_key()

    def plan(latest: ManifestSnapshot) -> ManifestEdit | None:
        if NAMING_KEY in latest.metadata:
            return None
        return ManifestEdit(
            metadata={NAMING_KEY: key}, properties=CommitSummary(Operation.METADATA).to_properties()
        )

    store.commit(lambda ds: ManifestSnapshot(ds, []), plan)
    return True
