"""The files a partition-table version references, and the check, at the moment a table is
used, that on a local root none of them is reached through a symbolic link.

Lance opens files by path and follows links. A table directory is checked as text (inside the
root) and on storage (a real directory of this namespace, see
:func:`~.storage.check_table_dir`) when a scan is planned; the files below it are checked here
each time a version is read (:func:`check_version_files`): its data and deletion files and its
index directories, one ``lstat`` each (the list of a pinned version is kept, a version never
changes). What remains is the interval between the check and Lance's own open of a file,
which only someone able to write into the root can use (see docs/explanation/reliability.md).
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import lance
from lance.fragment import FragmentMetadata

from . import storage


@dataclass(frozen=True)
class VersionFiles:
    """Files one table version references, relative to the table directory."""

    files: frozenset[str]  # data/..., _deletions/...
    indices: frozenset[str]  # index uuids (files under _indices/<uuid>/)
    transaction: str | None = None  # _transactions/<read_version>-<uuid>.txn

    def covers(self, path: str) -> bool:
        """Whether ``path`` (relative to the table directory) is one of these files."""
        if path in self.files or path == self.transaction:
            return True
        parts = path.split("/")
        return len(parts) > 2 and parts[0] == "_indices" and parts[1] in self.indices


def dataset_files(ds: lance.LanceDataset) -> VersionFiles:
    """The data, deletion and index files of the version ``ds`` is at (files stored under
    other base paths are left out: they are not this table's to manage)."""
    files: set[str] = set()
    for fragment in ds.get_fragments():
        meta = fragment.metadata
        for data_file in meta.files:
            if getattr(data_file, "base_id", None) is None:
                files.add("data/" + data_file.path)
        deletion = meta.deletion_file
        if deletion is not None and getattr(deletion, "base_id", None) is None:
            files.add(deletion.path(meta.id))
        for overlay in getattr(meta, "overlays", None) or []:
            overlay_file = getattr(overlay, "data_file", None)
            if overlay_file is not None and getattr(overlay_file, "base_id", None) is None:
                files.add("data/" + overlay_file.path)
    indices: set[str] = set()
    if ds.has_index:
        for index in ds.describe_indices():
            for segment in index.segments:
                if getattr(segment, "base_id", None) is None:
                    indices.add(str(segment.uuid))
    return VersionFiles(frozenset(files), frozenset(indices))


# (table path, version) -> its files, for the versions a process reads again and again
KEPT_FILE_LISTS = 4096
_lists: OrderedDict[tuple[str, int], VersionFiles] = OrderedDict()
_lists_lock = threading.Lock()


def _known(key: tuple[str, int]) -> VersionFiles | None:
    with _lists_lock:
        found = _lists.get(key)
        if found is not None:
            _lists.move_to_end(key)
        return found


def _keep(key: tuple[str, int], files: VersionFiles) -> None:
    with _lists_lock:
        _lists[key] = files
        while len(_lists) > KEPT_FILE_LISTS:
            _lists.popitem(last=False)


def check_version_files(
    root: str,
    location: str,
    ds: lance.LanceDataset,
    object_id: str | None = None,
    pinned: bool = True,
) -> None:
    """On a local root, right before the version ``ds`` of the table at ``location`` is read:
    refuse (:class:`PathEscapeError`, nothing read) a table directory that is, passes through
    or directly holds a symbolic link, or lies in a nested namespace (see
    :func:`~.storage.check_table_dir`), and any data or deletion file the version references,
    or index directory (or file in it), that is a link. Object stores have no links.

    A ``pinned`` version whose files this process knows already was checked when its read
    was planned (:func:`check_known_files`, in the planning thread), and is not checked
    again here; otherwise the files of a version read before are checked without listing
    them again (a version never changes)."""
    base = storage.local_path(root)
    if base is None:
        return
    table = os.path.join(base, location)
    key = (table, int(ds.version))
    known = _known(key)
    if pinned and known is not None:
        return
    storage.check_table_dir(root, location, object_id)
    files = known if known is not None else dataset_files(ds)
    _check_files(root, location, object_id, table, files)
    if known is None:
        _keep(key, files)


def check_known_files(
    root: str, location: str, version: int | None, object_id: str | None = None
) -> None:
    """On a local root, when a read of the table at ``location`` pinned to ``version`` is
    planned: refuse (:class:`PathEscapeError`) a link among the files of that version, when
    this process knows them (an earlier read); the others are checked when the table is
    opened (:func:`check_version_files`). The table directory itself is the caller's (see
    :func:`~.storage.check_table_dir`)."""
    base = storage.local_path(root)
    if base is None or version is None:
        return
    table = os.path.join(base, location)
    files = _known((table, int(version)))
    if files is not None:
        _check_files(root, location, object_id, table, files)


def _check_files(
    root: str, location: str, object_id: str | None, table: str, files: VersionFiles
) -> None:
    for rel in files.files:
        _refuse_link(root, location, object_id, os.path.join(table, rel), leaf=True)
    for uuid in files.indices:
        _refuse_link(root, location, object_id, os.path.join(table, "_indices", uuid))


def _refuse_link(
    root: str, location: str, object_id: str | None, path: str, leaf: bool = False
) -> None:
    """Raise when ``path`` is a link (a directory: or directly holds one); absent is no error
    (Lance reports a missing file itself)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):
        raise storage.link_error(root, location, object_id, path)
    if leaf or not stat.S_ISDIR(mode):
        return
    with os.scandir(path) as entries:
        linked = sorted(e.name for e in entries if e.is_symlink())
    if linked:
        raise storage.link_error(root, location, object_id, os.path.join(path, linked[0]))


def forget_file_lists() -> None:
    """Forget the kept file lists (tests, cold benchmarks)."""
    with _lists_lock:
        _lists.clear()


def data_bytes(fragments: Iterable[FragmentMetadata]) -> int:
    """Total size of the data files of ``fragments`` (0 where Lance did not record one)."""
    return sum(f.file_size_bytes or 0 for frag in fragments for f in frag.files)


__all__ = [
    "VersionFiles",
    "check_known_files",
    "check_version_files",
    "data_bytes",
    "dataset_files",
    "forget_file_lists",
]
