"""Refusing object stores that ignore put-if-absent, before a write commits to them.

Lance commits a table version by creating its manifest file only if it does not exist yet
(``PutMode::Create``; ``If-None-Match: *`` on S3). An S3-compatible endpoint that ignores that
condition lets two writers create the same version: both "succeed", one commit is silently
overwritten and its rows vanish. :func:`ensure_conditional_put` probes each object store once per
process (with ``obstore``, the Python binding of the ``object_store`` crate Lance uses, so Lance's
storage option names apply unchanged) and raises :class:`ConditionalPutUnsupportedError` for a
store that lets a second create overwrite the first.
"""

from __future__ import annotations

import os
import secrets
import threading
import warnings
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import obstore
from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

from . import storage
from .errors import ConditionalPutUnsupportedError, StorageError
from .storage import bucket_region

__all__ = ["UNSAFE_ENV", "bucket_region", "clear_probe_cache", "ensure_conditional_put"]

UNSAFE_ENV = "DLP_ALLOW_UNSAFE_COMMITS"
PROBE_DIR = "_dlp_probe"

# Schemes whose commits do not depend on the store's put-if-absent: local files (Lance commits
# with an atomic rename-if-not-exists), memory, and Lance's DynamoDB commit store.
_EXEMPT_SCHEMES = {"", "file", "memory", "s3+ddb"}
# Object stores obstore can open from a URL; any other scheme cannot be probed.
_PROBED_SCHEMES = storage.OBJECT_STORE_SCHEMES
# Name fragments of options (and environment variables) holding credentials: kept out of the
# probe cache key, which only needs to tell stores apart.
_SECRET_MARKERS = ("secret", "token", "password", "key", "sas", "credential", "signature")
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_")

_lock = threading.Lock()
_store_locks: dict[tuple[Any, ...], threading.Lock] = {}
# store key -> None (supported) or why the store is refused (no root in it: a store is probed
# once, through whichever root came first, and each refusal names the root being written)
_results: dict[tuple[Any, ...], str | None] = {}
_warned: set[tuple[Any, ...]] = set()


def ensure_conditional_put(root: str, storage_options: dict[str, str] | None) -> None:
    """Return when commits under ``root`` are safe against concurrent writers; raise
    :class:`ConditionalPutUnsupportedError` when its object store ignores put-if-absent.

    Local paths, ``file://``, ``memory://`` and ``s3+ddb://`` return at once. Other object
    stores are probed once per process and store (scheme, bucket, endpoint and options), by
    creating a scratch object under ``<root>/_dlp_probe/`` twice and deleting it. With the
    environment variable ``DLP_ALLOW_UNSAFE_COMMITS=1`` the probe is skipped (single-writer use
    only) and a warning is emitted once per store. A probe that fails for another reason
    (unreachable store, missing credentials) raises :class:`StorageError`."""
    root = os.fspath(root).rstrip("/")
    scheme = urlparse(root).scheme.lower() if "://" in root else ""
    if scheme in _EXEMPT_SCHEMES:
        return
    options = {k.lower(): str(v) for k, v in (storage_options or {}).items()}
    key = _store_key(scheme, root, options)
    if _unsafe_allowed():
        _warn_once(
            key,
            f"{root}: {UNSAFE_ENV} is set, so the object store is not checked for put-if-absent; "
            "if it ignores it, concurrent writers silently lose commits (single-writer use only)",
        )
        return
    if scheme not in _PROBED_SCHEMES:
        _warn_once(
            key,
            f"{root}: cannot check whether {scheme}:// stores honour put-if-absent; concurrent "
            "writers lose commits silently on a store that ignores it",
        )
        return
    with _lock:
        store_lock = _store_locks.setdefault(key, threading.Lock())
    with store_lock:
        if key not in _results:
            _results[key] = _probe(root, options)  # StorageError is not cached
        reason = _results[key]
    if reason is not None:
        raise ConditionalPutUnsupportedError(_refusal(root, reason))


def clear_probe_cache() -> None:
    """Forget every probe result and warning (the next call probes again)."""
    with _lock:
        _results.clear()
        _warned.clear()


def _unsafe_allowed() -> bool:
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


def _warn_once(key: tuple[Any, ...], message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _is_secret(name: str) -> bool:
    lower = name.lower()
    return any(marker in lower for marker in _SECRET_MARKERS)


def _store_key(scheme: str, root: str, options: Mapping[str, str]) -> tuple[Any, ...]:
    """What tells object stores apart: scheme, bucket, and the non-secret options and
    environment variables (the endpoint among them)."""
    env = tuple(
        sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith(_ENV_PREFIXES) and not _is_secret(k)
        )
    )
    opts = tuple(sorted((k, v) for k, v in options.items() if not _is_secret(k)))
    return (scheme, urlparse(root).netloc, opts, env)


# -- the probe ----------------------------------------------------------------------------------
def _probe(root: str, options: dict[str, str]) -> str | None:
    """None when a second create of a scratch object under ``root`` is refused, else why the
    store is refused (without ``root``: see :func:`_refusal`). Through the store the listings
    and deletions of maintenance use (:func:`.storage.object_store`: one per process)."""
    try:
        loc = storage.object_location(root, options)
    except StorageError as e:
        raise StorageError(
            f"{root}: cannot open the object store to probe put-if-absent: {e}",
            namespace=root,
        ) from None
    store = loc.store
    name = f"{PROBE_DIR}/{secrets.token_hex(8)}"
    path = loc.key(name)
    where = f"{root}/{name}"
    created = False
    try:
        try:
            obstore.put(store, path, b"1", mode="create")
            created = True
        except NotSupportedError as e:
            return f"the store does not implement create-if-absent ({_msg(e)})"
        except Exception as e:
            raise StorageError(
                f"{root}: cannot write the put-if-absent probe object {where}: {_msg(e)}",
                namespace=root,
                path=where,
            ) from None
        try:
            obstore.put(store, path, b"2", mode="create")
        except (AlreadyExistsError, PreconditionError):
            return None
        except NotSupportedError as e:
            return f"the store does not implement create-if-absent ({_msg(e)})"
        except Exception as e:
            raise StorageError(
                f"{root}: the put-if-absent probe of {where} failed: {_msg(e)}",
                namespace=root,
                path=where,
            ) from None
        return f"a second create-if-absent of a probe object under {PROBE_DIR}/ overwrote the first"
    finally:
        if created:
            _delete(store, path, where)


def _refusal(root: str, what: str) -> str:
    """The refusal to write under ``root`` (the namespace being written) because ``what``."""
    return (
        f"{root}: the object store ignores put-if-absent ({what}). Lance commits rely on it: "
        "concurrent writers would both commit the same version and one commit would be lost "
        "silently. Use Lance's DynamoDB commit store (s3+ddb://bucket/path?ddbTableName=<table>), "
        "or an endpoint that supports conditional writes (If-None-Match: *), or, for "
        f"single-writer use only, set the environment variable {UNSAFE_ENV}=1 to accept the risk. "
        "Nothing was written."
    )


def _delete(store: Any, path: str, where: str) -> None:
    last: Exception | None = None
    for _attempt in range(3):
        try:
            obstore.delete(store, path)
            return
        except Exception as e:
            last = e
    warnings.warn(
        f"could not delete the put-if-absent probe object {where}: {_msg(last or '')}; "
        "delete it by hand",
        RuntimeWarning,
        stacklevel=4,
    )


def _msg(error: BaseException | str) -> str:
    return storage.store_message(error)
