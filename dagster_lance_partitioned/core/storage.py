"""Paths and URIs under a namespace root (local directories or object-store URIs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from .errors import PathEscapeError

DETACHED_BIT = 1 << 63  # Lance marks detached versions with the top bit


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
    """The URI of the partition table at manifest ``location`` (strictly inside ``root``; on a
    local root, with no symbolic link on the way, see :func:`check_no_links`)."""
    check_location(location, object_id)
    check_no_links(root, location, object_id)
    return join(root, location)


def check_no_links(root: str, location: str, object_id: str | None = None) -> None:
    """On a local root (a path or ``file://``): refuse with :class:`PathEscapeError` a table
    directory ``location`` that is, or is reached through, a symbolic link, or that directly
    holds one (its ``data``, ``_versions``, ``_deletions``, ``_indices``, ... as links).

    Locations are checked as text by :func:`check_location`; a link would still lead the
    table's reads, writes and deletions wherever it points. Links below the root are refused
    wherever they point, inside the root too: a table directory is a real directory below the
    root, never an alias of another place (whose versions cleanup would judge by the wrong
    manifest rows). Links above the root (the root itself reached through one) are not looked
    at. Cheap: one ``lstat`` per location segment and one listing of the table directory;
    nothing there yet (a table about to be created) passes. Links deeper inside a table are
    met by the listings maintenance walks (:func:`list_tree`). Object stores have no links:
    nothing is checked."""
    base = local_path(root)
    if base is None:
        return
    path = base
    for part in location.split("/"):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return  # not there (yet): nothing below can be a link
        if stat.S_ISLNK(mode):
            raise link_error(root, location, object_id, path)
    try:
        with os.scandir(path) as entries:
            linked = sorted(e.name for e in entries if e.is_symlink())
    except OSError:
        return  # not a directory: opening it as a table fails on its own
    if linked:
        raise link_error(root, location, object_id, os.path.join(path, linked[0]))


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
    outside the namespace root (:class:`PathEscapeError`)."""
    check_location(location, object_id)
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


def local_path(uri: str) -> str | None:
    """The local filesystem path of ``uri``, or None for object stores."""
    if not is_uri(uri):
        return uri
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else None


def manifest_exists(manifest_uri: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a ``__manifest`` directory has any version files."""
    path = local_path(manifest_uri)
    if path is not None:
        return os.path.isdir(os.path.join(path, "_versions"))
    try:
        fs, p = filesystem(manifest_uri, storage_options)
        info = fs.get_file_info(pafs.FileSelector(p + "/_versions", allow_not_found=True))
        return bool(info)
    except Exception:
        return False


# --------------------------------------------------------------------------------------------
# Listing and deleting (maintenance and health checks)

# Lance storage-option names -> pyarrow S3FileSystem arguments (best effort; other options are
# left to pyarrow's own configuration, e.g. the AWS_* environment variables).
_S3_OPTIONS = {
    "aws_access_key_id": "access_key",
    "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "aws_region": "region",
    "region": "region",
    "aws_endpoint": "endpoint_override",
    "endpoint": "endpoint_override",
}


@dataclass(frozen=True)
class FileEntry:
    """A file found by :func:`list_files`."""

    path: str  # relative to the listed directory, ``/``-separated
    size: int
    mtime: float  # seconds since the epoch


def filesystem(
    uri: str, storage_options: dict[str, str] | None = None
) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path of ``uri`` in it (local paths, ``file://``, and the
    object stores pyarrow knows; S3 credentials and endpoint are taken from ``storage_options``
    when given there under Lance's names)."""
    local = local_path(uri)
    if local is not None:
        return pafs.LocalFileSystem(), local
    parsed = urlparse(uri)
    if parsed.scheme == "s3+ddb":  # Lance's DynamoDB commit store: the files are plain S3
        parsed = parsed._replace(scheme="s3", query="")
        uri = parsed.geturl()
    if parsed.scheme in ("s3", "s3a") and storage_options:
        kwargs: dict[str, Any] = {}
        for key, value in storage_options.items():
            arg = _S3_OPTIONS.get(key.lower())
            if arg is not None:
                kwargs[arg] = value
        endpoint = kwargs.get("endpoint_override")
        if isinstance(endpoint, str) and "://" in endpoint:
            scheme, _, host = endpoint.partition("://")
            kwargs["endpoint_override"], kwargs["scheme"] = host, scheme
        if kwargs:
            return pafs.S3FileSystem(**kwargs), f"{parsed.netloc}{parsed.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


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
    Object stores have no links (always none)."""
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
    fs, base = filesystem(uri, storage_options)
    selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
    out = []
    prefix = base.rstrip("/") + "/"
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(prefix) :] if info.path.startswith(prefix) else info.base_name
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        out.append(FileEntry(rel, int(info.size or 0), mtime))
    return out


def mtime(uri: str, storage_options: dict[str, str] | None = None) -> float | None:
    """The modification time of the file or directory ``uri`` (None: unknown, e.g. object-store
    prefixes, which have none; a local symbolic link's own, not its target's)."""
    local = local_path(uri)
    if local is not None:
        try:
            return float(os.lstat(local).st_mtime)
        except OSError:
            return None
    fs, path = filesystem(uri, storage_options)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound or info.mtime is None:
        return None
    return float(info.mtime.timestamp())


def list_dirs(uri: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """Names of the immediate subdirectories of ``uri`` (empty when it does not exist); on
    local paths symbolic links are not listed, even to directories."""
    local = local_path(uri)
    if local is not None:
        try:
            with os.scandir(local) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []
    fs, base = filesystem(uri, storage_options)
    selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
    return sorted(
        info.base_name
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.Directory
    )


def delete_files(
    uri: str, paths: Iterable[str], storage_options: dict[str, str] | None = None
) -> int:
    """Delete ``paths`` (relative to the directory ``uri``); returns how many existed.

    On local paths no link is followed: a path that is a symbolic link removes the link (never
    its target), and a path whose directories below ``uri`` (or ``uri`` itself) pass through a
    link raises :class:`PathEscapeError` before anything is deleted through it."""
    local = local_path(uri)
    if local is not None:
        return _delete_local_files(local, paths)
    fs, base = filesystem(uri, storage_options)
    removed = 0
    for rel in paths:
        try:
            fs.delete_file(f"{base.rstrip('/')}/{rel}")
        except FileNotFoundError:
            continue
        removed += 1
    return removed


def _delete_local_files(base: str, paths: Iterable[str]) -> int:
    clean: set[str] = set()  # directories below base known to be no links

    def check(rel: str, upto: str) -> None:
        if upto in clean:
            return
        parent, _, _ = upto.rpartition("/")
        if parent:
            check(rel, parent)
        if os.path.islink(os.path.join(base, upto)):
            raise PathEscapeError(
                f"{base}: {upto!r} is a symbolic link; refusing to delete {rel!r} through it",
                None,
                rel,
            )
        clean.add(upto)

    if os.path.islink(base):
        raise PathEscapeError(
            f"{base} is a symbolic link; refusing to delete files through it", None, base
        )
    removed = 0
    for rel in paths:
        problem = location_problem(rel)
        if problem is not None:
            raise PathEscapeError(f"{base}: refusing to delete {rel!r} ({problem})", None, rel)
        parent = rel.rpartition("/")[0]
        if parent:
            check(rel, parent)
        try:
            os.unlink(os.path.join(base, rel))
        except FileNotFoundError:
            continue
        removed += 1
    return removed


def delete_tree(uri: str, storage_options: dict[str, str] | None = None) -> None:
    """Delete the directory ``uri`` and everything under it (no error when it is gone). On local
    paths no link is followed: when ``uri`` is a symbolic link only the link goes, and links
    below it are removed as links, their targets untouched."""
    local = local_path(uri)
    if local is not None:
        if os.path.islink(local):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
            return
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(local)
        return
    fs, base = filesystem(uri, storage_options)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(base)


def relative_to(root: str, location: str) -> str | None:
    """``location`` as a path inside ``root``; None when it is not one (see
    :func:`location_problem`)."""
    return None if location_problem(location) is not None else location
