"""Paths and URIs under a namespace root (local directories or object-store URIs)."""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import re
import shutil
import stat
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import obstore
from obstore.store import from_url

from .errors import (
    PartitionedNamespaceError,
    PathEscapeError,
    StorageError,
    TableLocationError,
    clean_message,
    storage_error,
)
from .tuning import tuning

T = TypeVar("T")
R = TypeVar("R")

DETACHED_BIT = 1 << 63  # Lance marks detached versions with the top bit
MANIFEST_DIR = "__manifest"  # a namespace root's catalog table (and what marks a root)


def is_uri(path: str) -> bool:
    """Whether ``path`` has a scheme (``s3://``, ``file://``, ...)."""
    return "://" in path


def normalize_root(root: str | os.PathLike[str]) -> str:
    """The root as a string: absolute for local paths, unchanged for URIs."""
    root = os.fspath(root)
    if is_uri(root):
        path, sep, query = root.partition("?")
        return path.rstrip("/") + sep + query
    return os.path.abspath(root)


def join(root: str, relative: str) -> str:
    """``relative`` (a path inside the root, see :func:`check_location`) under ``root``."""
    check_location(relative)
    if is_uri(root):
        # a query (e.g. s3+ddb://bucket/root?ddbTableName=t) applies to every table below
        path, sep, query = root.partition("?")
        return f"{path.rstrip('/')}/{relative}{sep}{query}"
    return os.path.join(root, relative)


def location_problem(location: object) -> str | None:
    """Why ``location`` is not a path strictly inside a namespace root (None: it is)."""
    if not isinstance(location, str) or not location:
        return "it is empty"
    if "\x00" in location:
        return "it contains a NUL character"
    if is_uri(location):
        return "it is a URI"
    if location.startswith(("/", "\\")) or os.path.isabs(location) or location[1:3] == ":\\":
        return "it is an absolute path"
    if "\\" in location:
        return "it contains a backslash"
    if any(part in ("", ".", "..") for part in location.split("/")):
        return "it has an empty, '.' or '..' path segment"
    return None


def check_location(location: object, object_id: str | None = None, what: str = "location") -> str:
    """``location`` itself when it is a relative path strictly inside the root; otherwise
    :class:`PathEscapeError` naming the object and the location (nothing is touched)."""
    problem = location_problem(location)
    if problem is not None:
        owner = f"{object_id}: " if object_id else ""
        raise PathEscapeError(
            f"{owner}{what} {location!r} is not inside the namespace root ({problem}); "
            "refusing to read, write or delete through it",
            object_id,
            location if isinstance(location, str) else None,
        )
    return location  # type: ignore[return-value]


def table_uri(root: str, location: str, object_id: str | None = None) -> str:
    """The URI of the partition table at manifest ``location`` (strictly inside ``root`` and
    not ``__manifest``, see :func:`check_table_location`; on a local root, a real directory
    of this namespace, see :func:`check_table_dir`)."""
    check_table_location(location, object_id)
    check_table_dir(root, location, object_id)
    return join(root, location)


def check_table_location(location: object, object_id: str | None = None) -> str:
    """``location`` itself when, as text, it can be a partition table of the namespace: a path
    strictly inside the root (else :class:`PathEscapeError`, see :func:`check_location`) that
    is not ``__manifest`` and does not lie inside one (else :class:`TableLocationError`)."""
    check_location(location, object_id)
    assert isinstance(location, str)
    if MANIFEST_DIR in location.split("/"):
        raise manifest_location_error(object_id, location)
    return location


def manifest_location_error(object_id: str | None, location: str) -> TableLocationError:
    """The :class:`TableLocationError` of a table row whose location is, or lies inside, a
    ``__manifest`` directory."""
    owner = f"{object_id}: " if object_id else ""
    return TableLocationError(
        f"{owner}location {location!r} is (or lies inside) a {MANIFEST_DIR} directory, not a "
        "partition table; the manifest was changed outside this package. Refusing to read, "
        "write or delete through it",
        object_id,
        location,
    )


def nested_namespace_error(
    object_id: str | None, location: str, nested: str, at_root: bool
) -> TableLocationError:
    """The :class:`TableLocationError` of a table row whose location is the root of, or lies
    inside, the namespace nested at ``nested`` (relative to the root)."""
    owner = f"{object_id}: " if object_id else ""
    how = "is the root of" if at_root else "lies inside"
    return TableLocationError(
        f"{owner}location {location!r} {how} the namespace nested at {nested!r} (it holds a "
        f"{MANIFEST_DIR}); a partition table never lies in another namespace. Refusing to "
        "read, write or delete through it",
        object_id,
        location,
    )


def check_table_dir(root: str, location: str, object_id: str | None = None) -> None:
    """On a local root (a path or ``file://``): refuse a table directory ``location`` that is,
    is reached through, or directly holds a symbolic link (its ``data``, ``_versions``,
    ``_deletions``, ``_indices``, ... as links: :class:`PathEscapeError`), or that is the root
    of, or lies inside, a namespace nested below the root (a ``__manifest`` in it or in a
    directory on the way: :class:`TableLocationError`).

    Locations are checked as text by :func:`check_location`; a link would still lead the
    table's reads, writes and deletions wherever it points. Links below the root are refused
    wherever they point, inside the root too: a table directory is a real directory below the
    root, never an alias of another place (whose versions cleanup would judge by the wrong
    manifest rows). Links above the root (the root itself reached through one) are not looked
    at. Cheap: one ``lstat`` per location segment (two for the directories on the way of a
    location of several segments) and one listing of the table directory; nothing there yet
    (a table about to be created) passes. Links deeper inside a table are met by the listings
    maintenance walks (:func:`list_tree`) and by the checks of the files a read or write
    touches. Object stores have no links: nothing is checked (see :func:`check_not_nested`
    for their nested namespaces)."""
    base = local_path(root)
    if base is None:
        return
    path = base
    parts = location.split("/")
    for depth, part in enumerate(parts, 1):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return  # not there (yet): nothing below can be a link
        if stat.S_ISLNK(mode):
            raise link_error(root, location, object_id, path)
        if depth < len(parts) and os.path.lexists(os.path.join(path, MANIFEST_DIR)):
            nested = "/".join(parts[:depth])
            raise nested_namespace_error(object_id, location, nested, at_root=False)
    try:
        with os.scandir(path) as entries:
            found = [(e.name, e.is_symlink()) for e in entries]
    except OSError:
        return  # not a directory: opening it as a table fails on its own
    linked = sorted(name for name, is_link in found if is_link)
    if linked:
        raise link_error(root, location, object_id, os.path.join(path, linked[0]))
    if any(name == MANIFEST_DIR for name, _ in found):
        raise nested_namespace_error(object_id, location, location, at_root=True)


def check_not_nested(
    root: str, owners: Mapping[str, str | None], storage_options: dict[str, str] | None = None
) -> None:
    """On an object store: refuse (:class:`TableLocationError`) a table location (``owners``:
    location -> the object id of its row) of several segments below which, on the way from
    the root, a directory holds a ``__manifest`` (a namespace nested below the root); one
    delimited listing per such directory. Local roots are checked by
    :func:`check_table_dir`; single-segment locations have no directory on the way."""
    if local_path(root) is not None:
        return
    by_prefix: dict[str, str] = {}
    for location in owners:
        parts = location.split("/")
        for depth in range(1, len(parts)):
            by_prefix.setdefault("/".join(parts[:depth]), location)
    if not by_prefix:
        return
    prefixes = sorted(by_prefix)
    found = _parallel(lambda p: MANIFEST_DIR in list_dirs(join(root, p), storage_options), prefixes)
    for prefix, nested in zip(prefixes, found, strict=True):
        if nested:
            location = by_prefix[prefix]
            raise nested_namespace_error(owners[location], location, prefix, at_root=False)


def link_error(root: str, location: str, object_id: str | None, link: str) -> PathEscapeError:
    """The :class:`PathEscapeError` for the table at ``location`` whose path meets the symbolic
    link ``link`` (a local path), saying where it leads."""
    base = local_path(root) or root
    target = os.path.realpath(link)
    real_root = os.path.realpath(base)
    inside = target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)
    where = "inside the namespace root" if inside else "outside the namespace root"
    owner = f"{object_id}: " if object_id else ""
    return PathEscapeError(
        f"{owner}location {location!r}: {link} is a symbolic link to {target} ({where}); "
        "partition tables must be real directories below the root, refusing to read, write "
        "or delete through it",
        object_id,
        location,
    )


def check_table_refs(object_id: str, location: object, branch: str | None, tag: str | None) -> None:
    """Refuse a manifest table row whose location, ``read_branch`` or ``read_tag`` could lead
    outside the namespace root (:class:`PathEscapeError`), or whose location is ``__manifest``
    or lies inside one (:class:`TableLocationError`)."""
    check_table_location(location, object_id)
    check_ref_name(branch, object_id, "read_branch")
    check_ref_name(tag, object_id, "read_tag")


def check_ref_name(name: str | None, object_id: str | None, what: str) -> None:
    """Refuse a ``read_branch`` / ``read_tag`` value that could name a path outside its table."""
    if name is None:
        return
    problem = location_problem(name)
    if problem is None and name.startswith("-"):
        problem = "it starts with '-'"
    if problem is not None:
        raise PathEscapeError(
            f"{object_id}: {what} {name!r} is not a safe name ({problem}); refusing to use it",
            object_id,
            name,
        )


@functools.lru_cache(maxsize=4096)
def local_path(uri: str) -> str | None:
    """The local filesystem path of ``uri``, or None for object stores."""
    if not is_uri(uri):
        return uri
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else None


def manifest_exists(manifest_uri: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a ``__manifest`` directory has any version files (on an object store: one
    listing request; a store that cannot be reached raises :class:`StorageError`)."""
    path = local_path(manifest_uri)
    if path is not None:
        return os.path.isdir(os.path.join(path, "_versions"))
    if store_scheme(manifest_uri) not in OBJECT_STORE_SCHEMES:
        return False  # e.g. memory://: nothing this package can list
    loc = object_location(manifest_uri, storage_options)
    versions = loc.key("_versions")
    try:
        for chunk in obstore.list(loc.store, versions, chunk_size=1):
            if any(_relative(meta["path"], versions) for meta in chunk):
                return True
        return False
    except FileNotFoundError:
        return False
    except BaseException as e:
        raise _store_error(e, manifest_uri, "looking for __manifest versions") from None


_V2_VERSION_FILE = re.compile(r"^(\d{20})\.manifest$")
_U64_MAX = (1 << 64) - 1


def newest_listed_version(
    manifest_uri: str, storage_options: dict[str, str] | None = None
) -> int | None:
    """The newest version of the Lance table at ``manifest_uri`` on an object store, from the
    first entries of one listing of its ``_versions`` (version files named counting down
    from u64::MAX list newest first); None when that cannot tell (local paths, other names,
    no version file)."""
    if store_scheme(manifest_uri) not in OBJECT_STORE_SCHEMES:
        return None
    loc = object_location(manifest_uri, storage_options)
    versions = loc.key("_versions")
    try:
        for chunk in obstore.list(loc.store, versions, chunk_size=16):
            for meta in chunk:
                name = _relative(meta["path"], versions)
                if match := _V2_VERSION_FILE.match(name):
                    return _U64_MAX - int(match.group(1))
                if name[:1].isdigit():
                    return None  # another naming (V1 counts up): the first entry is not newest
            return None
    except FileNotFoundError:
        return None
    except BaseException as e:
        raise _store_error(e, manifest_uri, "listing __manifest versions") from None
    return None


# --------------------------------------------------------------------------------------------
# Object stores: obstore, the Python binding of the object_store crate Lance itself uses, so
# Lance's storage options (and the AWS_* / GOOGLE_* / AZURE_* environment variables) configure
# both the same way.

# Schemes of the object stores obstore opens from a URL (``s3+ddb`` roots: their files are
# plain S3, see :func:`store_scheme`).
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl"})
S3_SCHEMES = frozenset({"s3", "s3a"})
# object_store's HTTP client options (``ClientConfigKey``): passed as client options; every
# other option object_store knows configures the store itself.
CLIENT_KEYS = frozenset(
    {
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
)
_STORE_PREFIXES = ("aws_", "azure_", "google_")  # object_store also takes aws_timeout, ...
DEFAULT_MAX_RETRIES = 3  # Lance option ``client_max_retries``
DEFAULT_RETRY_TIMEOUT_S = 30.0  # Lance option ``client_retry_timeout`` (seconds)
REGION_LOOKUP_BASE = "https://s3.amazonaws.com"
_HEAD_AT_MOST = 32  # paths per directory checked with HEAD; more: one listing of it
_THREADS = 8

_stores_lock = threading.Lock()
_store_locks: dict[tuple[Any, ...], threading.Lock] = {}
_stores: dict[tuple[Any, ...], Any] = {}


@dataclass(frozen=True)
class StoreConfig:
    """Lance storage options as obstore arguments."""

    config: dict[str, str]  # object_store store options (``aws_endpoint``, ...)
    client_options: dict[str, str]  # object_store HTTP client options (``allow_http``, ...)
    retry_config: dict[str, Any]  # from Lance's ``client_max_retries``/``client_retry_timeout``


@dataclass(frozen=True)
class ObjectLocation:
    """Where an object-store URI is: the store (one per process per store URL and options,
    see :func:`object_store`), the store's URL (``s3://bucket``) and the key of the URI in it
    (no leading or trailing ``/``; empty for the bucket itself)."""

    store: Any
    url: str
    path: str

    def key(self, relative: str) -> str:
        """The key of ``relative`` (a ``/``-separated path) below this location."""
        return f"{self.path}/{relative}" if self.path else relative


def store_scheme(uri: str) -> str:
    """The scheme of the object store holding ``uri`` (``s3+ddb`` roots, Lance's DynamoDB
    commit store, keep their files on plain S3: ``s3``); empty for local paths."""
    scheme = urlparse(uri).scheme.lower() if is_uri(uri) else ""
    return "s3" if scheme == "s3+ddb" else scheme


def object_location(uri: str, storage_options: dict[str, str] | None = None) -> ObjectLocation:
    """The store, store URL and key of the object-store URI ``uri`` (its query, e.g. the
    ``ddbTableName`` of an ``s3+ddb`` root, is ignored). Raises :class:`StorageError` for
    schemes obstore does not open and for stores that cannot be opened."""
    parsed = urlparse(uri)
    scheme = store_scheme(uri)
    if scheme not in OBJECT_STORE_SCHEMES:
        raise StorageError(
            f"{uri}: cannot list or delete files on {scheme or 'local'}:// roots here (object "
            f"stores supported: {', '.join(sorted(OBJECT_STORE_SCHEMES))})",
            namespace=uri,
            path=uri,
        )
    url = f"{scheme}://{parsed.netloc}"
    return ObjectLocation(object_store(url, storage_options), url, unquote(parsed.path).strip("/"))


def object_store(url: str, storage_options: dict[str, str] | None = None) -> Any:
    """The obstore store of the store URL ``url`` (``s3://bucket``, ``az://container``, ...)
    configured from Lance ``storage_options``: one per process per URL and options, shared by
    every thread (its HTTP connections are reused), built on first use."""
    options = {k.lower(): str(v) for k, v in (storage_options or {}).items()}
    key = (url, tuple(sorted(options.items())))
    with _stores_lock:
        store = _stores.get(key)
        if store is not None:
            return store
        lock = _store_locks.setdefault(key, threading.Lock())
    with lock:  # one build per store; other stores are not held up by it
        store = _stores.get(key)
        if store is None:
            store = _open_store(url, options)
            with _stores_lock:
                _stores[key] = store
    return store


def clear_store_cache() -> None:
    """Forget every store :func:`object_store` built (the next use builds them again)."""
    with _stores_lock:
        _stores.clear()
        _store_locks.clear()


# The Lance session of writes and manifest opens (see lance_session); scans have their own.
WRITE_SESSION_METADATA_BYTES = 64 * 1024 * 1024
WRITE_SESSION_INDEX_BYTES = 64 * 1024 * 1024
_lance_session: Any = None
_lance_session_lock = threading.Lock()


def lance_session() -> Any:
    """The Lance session this process writes partition tables and opens ``__manifest`` with.

    Without one, every Lance call builds its own object-store client (credentials, HTTP
    client, connection pool) and reads again what it read before: a new partition table
    cost twice the client CPU. Shared, one client per store serves every call, and the
    manifests of versions opened or committed are kept (bounded in bytes) for the next open of
    the same version (a version never changes)."""
    global _lance_session
    with _lance_session_lock:
        if _lance_session is None:
            from lance.lance import _Session  # what lance.Session is (not re-exported)

            _lance_session = _Session(
                index_cache_size_bytes=WRITE_SESSION_INDEX_BYTES,
                metadata_cache_size_bytes=WRITE_SESSION_METADATA_BYTES,
            )
        return _lance_session


def clear_lance_session() -> None:
    """Drop the session of :func:`lance_session` (the next call makes a new one, with nothing
    cached: benchmarks of cold operations, tests)."""
    global _lance_session
    with _lance_session_lock:
        _lance_session = None


def _open_store(url: str, options: dict[str, str]) -> Any:
    cfg = store_config(url, options)
    config = dict(cfg.config)
    if store_scheme(url) in S3_SCHEMES:
        region = _s3_region(urlparse(url).netloc, config)
        if region:
            config["aws_region"] = region
    try:
        return from_url(  # type: ignore[call-overload]  # config dicts built at run time
            url,
            config=config or None,
            client_options=cfg.client_options or None,
            retry_config=cfg.retry_config,
        )
    except BaseException as e:
        raise _store_error(e, url, "opening the object store") from None


def store_config(url: str, options: dict[str, str]) -> StoreConfig:
    """Lance storage options (lower-case names) as obstore store config, HTTP client options
    and retry config. Options only Lance knows (``download_retry_count``, ...) are left out,
    as Lance leaves them out of its object_store; ``aws_timeout`` and the like are client
    options under their plain names."""
    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in options.items():
        bare = next((key[len(p) :] for p in _STORE_PREFIXES if key.startswith(p)), key)
        if key in CLIENT_KEYS or bare in CLIENT_KEYS:
            client[bare] = value
            continue
        if key in ("client_max_retries", "client_retry_timeout"):
            continue  # the retry config below
        try:
            from_url(url, config={key: value})  # type: ignore[call-overload]
        except BaseException as e:  # pyo3 panics derive from BaseException
            name = type(e).__name__
            if name == "UnknownConfigurationKeyError":
                continue  # not an object_store option
            if name == "PanicException":
                client[key] = value  # a client option object_store parses as a store key
                continue
            if not isinstance(e, Exception):
                raise
        config[key] = value
    for key in list(client):
        try:
            from_url(url, client_options={key: client[key]})  # type: ignore[call-overload]
        except ValueError:
            del client[key]  # not a client option either
        except Exception:
            pass  # a valid key; the real open reports what is wrong
    try:
        retries = int(options.get("client_max_retries", DEFAULT_MAX_RETRIES))
        timeout = float(options.get("client_retry_timeout", DEFAULT_RETRY_TIMEOUT_S))
    except ValueError as e:
        raise StorageError(
            f"{url}: client_max_retries must be an integer and client_retry_timeout a number "
            f"of seconds: {e}",
            namespace=url,
        ) from None
    retry = {"max_retries": retries, "retry_timeout": datetime.timedelta(seconds=timeout)}
    return StoreConfig(config, client, retry)


def _s3_region(
    bucket: str, config: Mapping[str, str], lookup_base: str = REGION_LOOKUP_BASE
) -> str | None:
    """The bucket's region when neither the options nor the environment give a region or an
    endpoint (looked up with HeadBucket, as Lance does); None otherwise or when unknown."""
    given = {k for k in config if "region" in k or "endpoint" in k}
    env = {k for k in os.environ if k.startswith("AWS_") and ("REGION" in k or "ENDPOINT" in k)}
    if given or env:
        return None
    return bucket_region(bucket, lookup_base)


def bucket_region(bucket: str, lookup_base: str = REGION_LOOKUP_BASE) -> str | None:
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


_SECRET_PARAMS = re.compile(
    r"(?i)\b(sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
    r"x-goog-signature|x-goog-credential)=[^&\s\"']+"
)


def store_message(error: BaseException | str) -> str:
    """An obstore error's message: no Rust debug dump, no signatures from request URLs."""
    text = str(error).split("\n\nDebug source:", 1)[0]
    return clean_message(_SECRET_PARAMS.sub(r"\1=<redacted>", text))


def _store_error(error: BaseException, uri: str, what: str) -> StorageError:
    """``error`` (raised by obstore) as :class:`StorageError`; errors of this package and
    interrupts are raised as they are."""
    if isinstance(error, PartitionedNamespaceError):
        raise error
    if not isinstance(error, Exception) and type(error).__name__ != "PanicException":
        raise error  # KeyboardInterrupt, SystemExit, ...
    return storage_error(RuntimeError(store_message(error)), uri, what)


def _relative(path: str, prefix: str) -> str:
    """``path`` (a key the store listed under ``prefix``) relative to ``prefix``; empty for
    the prefix itself (a directory marker object)."""
    if not prefix:
        return path
    return path[len(prefix) + 1 :] if path.startswith(prefix + "/") else ""


def _parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


# --------------------------------------------------------------------------------------------
# Listing and deleting (maintenance and health checks)


@dataclass(frozen=True)
class FileEntry:
    """A file found by :func:`list_files`."""

    path: str  # relative to the listed directory, ``/``-separated
    size: int
    mtime: float  # seconds since the epoch


def list_files(uri: str, storage_options: dict[str, str] | None = None) -> list[FileEntry]:
    """Every file under the directory ``uri`` (recursively); empty when it does not exist. On
    local paths symbolic links are neither listed nor followed (see :func:`list_tree`)."""
    return list_tree(uri, storage_options)[0]


def list_tree(
    uri: str, storage_options: dict[str, str] | None = None
) -> tuple[list[FileEntry], list[str]]:
    """Every file under the directory ``uri`` (recursively; empty when it does not exist), and
    the symbolic links met on the way, relative to ``uri`` (``.``: ``uri`` itself is one).

    On local paths a link -- to a file or a directory, wherever it points -- is neither listed
    as a file nor descended into, so nothing a listing hands to a deletion lies behind a link.
    Object stores have no links (always none); there the listing is one recursive listing of
    the prefix (paginated)."""
    base = local_path(uri)
    if base is None:
        return _list_remote(uri, storage_options), []
    if os.path.islink(base):
        return [], ["."]
    files: list[FileEntry] = []
    links: list[str] = []
    pending = [(base, "")]
    while pending:
        here, prefix = pending.pop()
        try:
            with os.scandir(here) as entries:
                found = list(entries)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone meanwhile (or never there)
        for entry in found:
            rel = prefix + entry.name
            try:
                if entry.is_symlink():
                    links.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    files.append(FileEntry(rel, int(info.st_size), float(info.st_mtime)))
            except FileNotFoundError:
                continue
    return sorted(files, key=lambda f: f.path), sorted(links)


def _list_remote(uri: str, storage_options: dict[str, str] | None) -> list[FileEntry]:
    loc = object_location(uri, storage_options)
    out = []
    try:
        for chunk in obstore.list(loc.store, loc.path or None, chunk_size=1000):
            for meta in chunk:
                rel = _relative(meta["path"], loc.path)
                if rel:
                    mtime = meta["last_modified"].timestamp()
                    out.append(FileEntry(rel, int(meta["size"]), float(mtime)))
    except FileNotFoundError:
        return []
    except BaseException as e:
        raise _store_error(e, uri, "listing files") from None
    return sorted(out, key=lambda f: f.path)


def mtime(uri: str, storage_options: dict[str, str] | None = None) -> float | None:
    """The modification time of the file or directory ``uri`` (None: unknown, e.g. object-store
    prefixes, which have none; a local symbolic link's own, not its target's)."""
    local = local_path(uri)
    if local is not None:
        try:
            return float(os.lstat(local).st_mtime)
        except OSError:
            return None
    loc = object_location(uri, storage_options)
    if not loc.path:
        return None  # a bucket
    try:
        meta = obstore.head(loc.store, loc.path)
    except FileNotFoundError:
        return None
    except BaseException as e:
        raise _store_error(e, uri, "reading the modification time") from None
    return float(meta["last_modified"].timestamp())


def list_dirs(
    uri: str, storage_options: dict[str, str] | None = None, links: bool = False
) -> list[str]:
    """Names of the immediate subdirectories of ``uri`` (empty when it does not exist); on
    local paths symbolic links are not listed, even to directories (with ``links``: links to
    directories are). On object stores: the common prefixes of one delimited listing."""
    local = local_path(uri)
    if local is not None:
        try:
            with os.scandir(local) as entries:
                return sorted(
                    e.name
                    for e in entries
                    if e.is_dir(follow_symlinks=False) or (links and e.is_dir())
                )
        except (FileNotFoundError, NotADirectoryError):
            return []
    loc = object_location(uri, storage_options)
    try:
        found = obstore.list_with_delimiter(loc.store, loc.path or None)
    except FileNotFoundError:
        return []
    except BaseException as e:
        raise _store_error(e, uri, "listing directories") from None
    names = {_relative(p.rstrip("/"), loc.path) for p in found["common_prefixes"]}
    return sorted(n for n in names if n and "/" not in n)


def is_dir(uri: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether ``uri`` is a directory: locally (links followed), an existing one; on an object
    store, a bucket that can be listed or a prefix with an object below it."""
    local = local_path(uri)
    if local is not None:
        return os.path.isdir(local)
    loc = object_location(uri, storage_options)
    try:
        for chunk in obstore.list(loc.store, loc.path or None, chunk_size=1):
            if not loc.path or any(_relative(m["path"], loc.path) for m in chunk):
                return True
        return not loc.path
    except FileNotFoundError:
        return False
    except BaseException as e:
        raise _store_error(e, uri, "listing") from None


def file_sizes(
    uri: str, paths: Iterable[str], storage_options: dict[str, str] | None = None
) -> dict[str, int]:
    """Sizes of the files ``paths`` (relative to the directory ``uri``) that exist; locally
    links are followed, on object stores one HEAD request per file (a few at a time)."""
    wanted = sorted(set(paths))
    local = local_path(uri)
    if local is not None:
        out = {}
        for rel in wanted:
            with contextlib.suppress(OSError):
                out[rel] = int(os.stat(os.path.join(local, rel)).st_size)
        return out
    loc = object_location(uri, storage_options)

    def size(rel: str) -> int | None:
        try:
            return int(obstore.head(loc.store, loc.key(rel))["size"])
        except FileNotFoundError:
            return None
        except BaseException as e:
            raise _store_error(e, uri, f"reading the size of {rel}") from None

    sizes = _parallel(size, wanted)
    return {rel: s for rel, s in zip(wanted, sizes, strict=True) if s is not None}


def delete_files(
    uri: str, paths: Iterable[str], storage_options: dict[str, str] | None = None
) -> int:
    """Delete ``paths`` (relative to the directory ``uri``); returns how many existed.

    On local paths no link is followed: a path that is a symbolic link removes the link (never
    its target), and a path whose directories below ``uri`` (or ``uri`` itself) pass through a
    link raises :class:`PathEscapeError` before anything is deleted through it.

    On object stores the files that exist are found first (a HEAD per file, or one listing of
    a directory holding many of them), then deleted in batches (S3 ``DeleteObjects`` and
    Azure blob batches of up to 1000 keys, a few batches at a time)."""
    local = local_path(uri)
    if local is not None:
        return _delete_local_files(local, paths)
    wanted = sorted(set(paths))
    for rel in wanted:
        problem = location_problem(rel)
        if problem is not None:
            raise PathEscapeError(f"{uri}: refusing to delete {rel!r} ({problem})", None, rel)
    if not wanted:
        return 0
    loc = object_location(uri, storage_options)
    existing = _existing(loc, uri, [loc.key(rel) for rel in wanted])
    _delete_keys(loc, uri, existing)
    return len(existing)


def _existing(loc: ObjectLocation, uri: str, keys: list[str]) -> list[str]:
    """Those of ``keys`` that exist: per directory, HEAD requests for a few keys, one listing
    (with a delimiter: that directory only) for many."""
    by_parent: dict[str, list[str]] = {}
    for key in keys:
        by_parent.setdefault(key.rpartition("/")[0], []).append(key)

    def exists(key: str) -> bool:
        try:
            obstore.head(loc.store, key)
            return True
        except FileNotFoundError:
            return False
        except BaseException as e:
            raise _store_error(e, uri, f"looking for {key}") from None

    def listed(parent: str) -> set[str]:
        try:
            found = obstore.list_with_delimiter(loc.store, parent or None)
        except FileNotFoundError:
            return set()
        except BaseException as e:
            raise _store_error(e, uri, f"listing {parent or loc.url}") from None
        return {meta["path"] for meta in found["objects"]}

    few = [k for group in by_parent.values() if len(group) <= _HEAD_AT_MOST for k in group]
    many = [p for p, group in by_parent.items() if len(group) > _HEAD_AT_MOST]
    out = [k for k, there in zip(few, _parallel(exists, few), strict=True) if there]
    for parent, present in zip(many, _parallel(listed, many), strict=True):
        out += [k for k in by_parent[parent] if k in present]
    return sorted(out)


def _delete_keys(loc: ObjectLocation, uri: str, keys: list[str]) -> None:
    """Delete ``keys`` in batches, a few batches at a time; keys already gone are no error
    (a batch a store refuses for a missing key -- Azure, GCS -- is deleted key by key)."""

    def delete_key(key: str) -> None:
        try:
            obstore.delete(loc.store, key)
        except FileNotFoundError:
            pass
        except BaseException as e:
            raise _store_error(e, uri, f"deleting {key}") from None

    def batch(keys: list[str]) -> None:
        try:
            obstore.delete(loc.store, keys)
        except FileNotFoundError:
            _parallel(delete_key, keys)
        except BaseException as e:
            raise _store_error(e, uri, f"deleting {len(keys)} files") from None

    size = tuning().delete_batch
    _parallel(batch, [keys[i : i + size] for i in range(0, len(keys), size)])


_DIR_FLAGS = (
    os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def _delete_local_files(base: str, paths: Iterable[str]) -> int:
    """Delete ``paths`` below the local directory ``base`` without ever following a link, at
    the moment of deletion: ``base`` and every directory below it are opened without
    following links (``O_NOFOLLOW``, each relative to the descriptor of its parent), and each
    file is unlinked relative to its directory's descriptor, so a directory swapped for a
    link at any time cannot lead a deletion elsewhere."""

    def refuse(rel: str, what: str) -> PathEscapeError:
        return PathEscapeError(
            f"{base}: {what!r} is a symbolic link; refusing to delete {rel!r} through it",
            None,
            rel,
        )

    try:
        base_fd = os.open(base, _DIR_FLAGS)
    except FileNotFoundError:
        return 0
    except OSError:
        if os.path.islink(base):
            raise PathEscapeError(
                f"{base} is a symbolic link; refusing to delete files through it", None, base
            ) from None
        raise
    fds: dict[str, int | None] = {"": base_fd}

    def directory(rel: str, upto: str) -> int | None:
        if upto in fds:
            return fds[upto]
        parent, _, name = upto.rpartition("/")
        parent_fd = directory(rel, parent)
        fd = None
        if parent_fd is not None:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except FileNotFoundError:
                fd = None
            except OSError:
                if stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode):
                    raise refuse(rel, upto) from None
                raise
        fds[upto] = fd
        return fd

    removed = 0
    try:
        for rel in paths:
            problem = location_problem(rel)
            if problem is not None:
                raise PathEscapeError(f"{base}: refusing to delete {rel!r} ({problem})", None, rel)
            parent, _, name = rel.rpartition("/")
            fd = directory(rel, parent)
            if fd is None:
                continue
            try:
                os.unlink(name, dir_fd=fd)  # a link is removed itself, never its target
            except FileNotFoundError:
                continue
            removed += 1
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    return removed


def delete_tree(uri: str, storage_options: dict[str, str] | None = None) -> None:
    """Delete the directory ``uri`` and everything under it (no error when it is gone). On local
    paths no link is followed: when ``uri`` is a symbolic link only the link goes, and links
    below it are removed as links, their targets untouched. On object stores: one listing of
    the prefix, then batched deletes (a bucket or container itself is never emptied)."""
    local = local_path(uri)
    if local is not None:
        if os.path.islink(local):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
            return
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(local)
        return
    loc = object_location(uri, storage_options)
    if not loc.path:
        raise PathEscapeError(
            f"{uri}: refusing to delete everything in the bucket or container", None, uri
        )
    try:
        keys = [
            meta["path"]
            for chunk in obstore.list(loc.store, loc.path, chunk_size=1000)
            for meta in chunk
        ]
    except FileNotFoundError:
        return
    except BaseException as e:
        raise _store_error(e, uri, "listing files to delete") from None
    _delete_keys(loc, uri, sorted(keys))


def relative_to(root: str, location: str) -> str | None:
    """``location`` as a path inside ``root``; None when it is not one (see
    :func:`location_problem`)."""
    return None if location_problem(location) is not None else location
