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

import datetime
import os
import secrets
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .errors import ConditionalPutUnsupportedError, StorageError, clean_message

UNSAFE_ENV = "DLP_ALLOW_UNSAFE_COMMITS"
PROBE_DIR = "_dlp_probe"

# Schemes whose commits do not depend on the store's put-if-absent: local files (Lance commits
# with an atomic rename-if-not-exists), memory, and Lance's DynamoDB commit store.
_EXEMPT_SCHEMES = {"", "file", "memory", "s3+ddb"}
# Object stores obstore can open from a URL; any other scheme cannot be probed.
_PROBED_SCHEMES = {"s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl"}
_S3_SCHEMES = {"s3", "s3a"}
# object_store's HTTP client options (``ClientConfigKey``); every other option configures the
# store itself.
_CLIENT_KEYS = {
    "allow_http",
    "allow_invalid_certificates",
    "connect_timeout",
    "default_content_type",
    "http1_only",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle",
    "http2_max_frame_size",
    "http2_only",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "proxy_url",
    "proxy_ca_certificate",
    "proxy_excludes",
    "randomize_addresses",
    "timeout",
    "user_agent",
}
# Name fragments of options (and environment variables) holding credentials: kept out of the
# probe cache key, which only needs to tell stores apart.
_SECRET_MARKERS = ("secret", "token", "password", "key", "sas", "credential", "signature")
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_")
_DEFAULT_MAX_RETRIES = 3
_DEFAULT_RETRY_TIMEOUT_S = 30.0
_REGION_LOOKUP_BASE = "https://s3.amazonaws.com"

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
            _results[key] = _probe(root, scheme, options)  # StorageError is not cached
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
@dataclass
class _StoreConfig:
    config: dict[str, str]
    client_options: dict[str, str]
    retry_config: dict[str, Any]


def _probe(root: str, scheme: str, options: dict[str, str]) -> str | None:
    """None when a second create of a scratch object under ``root`` is refused, else why the
    store is refused (without ``root``: see :func:`_refusal`)."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

    store = _open_store(root, scheme, options)
    path = f"{PROBE_DIR}/{secrets.token_hex(8)}"
    where = f"{root}/{path}"
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
    import obstore

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
    return clean_message(str(error).split("\n\nDebug source:", 1)[0])


def _open_store(root: str, scheme: str, options: dict[str, str]) -> Any:
    """An obstore store whose prefix is ``root``, configured from Lance storage options."""
    from obstore.store import from_url

    cfg = _split_options(root, options)
    if scheme in _S3_SCHEMES:
        region = _s3_region(urlparse(root).netloc, cfg.config)
        if region:
            cfg.config["aws_region"] = region
    try:
        return from_url(  # type: ignore[call-overload]  # config dicts built at run time
            root,
            config=cfg.config or None,
            client_options=cfg.client_options or None,
            retry_config=cfg.retry_config,
        )
    except Exception as e:
        raise StorageError(
            f"{root}: cannot open the object store to probe put-if-absent: {_msg(e)}",
            namespace=root,
        ) from None


def _split_options(root: str, options: dict[str, str]) -> _StoreConfig:
    """Lance storage options as obstore store config, client options and retry config; options
    only Lance knows (e.g. ``download_retry_count``) are left out."""
    from obstore.store import from_url

    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in options.items():
        if key in _CLIENT_KEYS:
            client[key] = value
            continue
        try:
            from_url(root, config={key: value})  # type: ignore[call-overload]
        except Exception as e:
            if type(e).__name__ == "UnknownConfigurationKeyError":
                continue  # not an object_store option
        except BaseException as e:  # pyo3 panics derive from BaseException
            if type(e).__name__ != "PanicException":
                raise
            client[key] = value  # a client option object_store parses as a store key
            continue
        config[key] = value
    for key in list(client):
        try:
            from_url(root, client_options={key: client[key]})  # type: ignore[call-overload]
        except ValueError:
            del client[key]
        except Exception:
            pass  # a valid key; the real open reports what is wrong
    retry = {
        "max_retries": int(options.get("client_max_retries", _DEFAULT_MAX_RETRIES)),
        "retry_timeout": datetime.timedelta(
            seconds=float(options.get("client_retry_timeout", _DEFAULT_RETRY_TIMEOUT_S))
        ),
    }
    return _StoreConfig(config, client, retry)


def _s3_region(
    bucket: str, config: Mapping[str, str], lookup_base: str = _REGION_LOOKUP_BASE
) -> str | None:
    """The bucket's region when neither the options nor the environment give a region or an
    endpoint (looked up with HeadBucket, as Lance does); None otherwise or when unknown."""
    given = {k for k in config if "region" in k or "endpoint" in k}
    env = {k for k in os.environ if k.startswith("AWS_") and ("REGION" in k or "ENDPOINT" in k)}
    if given or env:
        return None
    return bucket_region(bucket, lookup_base)


def bucket_region(bucket: str, lookup_base: str = _REGION_LOOKUP_BASE) -> str | None:
    """The ``x-amz-bucket-region`` of ``bucket`` from a HeadBucket request to ``lookup_base``
    (None when the request gives none)."""
    request = urllib.request.Request(f"{lookup_base.rstrip('/')}/{bucket}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            region = response.headers.get("x-amz-bucket-region")
            return str(region) if region else None
    except urllib.error.HTTPError as e:  # 301/403 still name the region
        return e.headers.get("x-amz-bucket-region")
    except (urllib.error.URLError, OSError):
        return None
