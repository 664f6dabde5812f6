"""Paths and URIs under a namespace root (local directories or object-store URIs)."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pyarrow.fs as pafs


def is_uri(path: str) -> bool:
    """Whether ``path`` has a scheme (``s3://``, ``file://``, ...)."""
    return "://" in path


def normalize_root(root: str | os.PathLike[str]) -> str:
    """The root as a string: absolute for local paths, unchanged for URIs."""
    root = os.fspath(root)
    if is_uri(root):
        return root.rstrip("/")
    return os.path.abspath(root)


def join(root: str, relative: str) -> str:
    """``relative`` under ``root``; absolute locations and URIs are returned as they are."""
    if is_uri(relative) or os.path.isabs(relative):
        return relative
    if is_uri(root):
        return f"{root.rstrip('/')}/{relative}"
    return os.path.join(root, relative)


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
        fs, p = pafs.FileSystem.from_uri(manifest_uri)
        info = fs.get_file_info(pafs.FileSelector(p + "/_versions", allow_not_found=True))
        return bool(info)
    except Exception:
        return False
