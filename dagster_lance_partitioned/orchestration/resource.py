"""``LancePartitionedResource``: where the Lance partitioned namespaces of assets live (a root and
its storage options), and the namespace of an asset opened from its key. The IO manager, the
asset checks, the sensors, the maintenance job and the ``dg`` component all locate namespaces
through it, so asset code that reads, merges or deletes rows itself finds exactly the namespace
the IO manager writes::

    @dg.asset(deps=["flights"])
    def late_flights(lance: LancePartitionedResource) -> None:
        ns = lance.namespace(dg.AssetKey("flights"))
        late = ns.to_table(filter="dep_delay > 60")
        similar = lance.search("flights", late["embedding"][0].as_py(), k=5,
                               filter="origin = 'JFK'")
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field

from ..core import IndexCoverage, NamespaceNotFoundError, PartitionedNamespace
from ..core.engine import MANIFEST_DIR, FilterLike, join_uri, list_files, manifest_exists
from .errors import InvalidAssetKeyError, NestedAssetError, StorageRootError

# an asset key part usable as one directory name: letters, digits, '_' and '-', with '.' only
# between them (so never '.', '..', a hidden name or a trailing dot)
_SAFE_KEY_PART = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")

AssetKeyLike = dg.AssetKey | str | Sequence[str]  # a string is a key's user form, "a/b"


class LancePartitionedResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The storage of Lance partitioned namespaces: one per asset, at ``<root>/<asset key
    path>``. ``namespace()`` opens an asset's namespace (to scan, merge, delete, ...),
    ``search()`` searches it across partitions, ``indexes()`` lists its indexes and ``uri()``
    gives its location, by the rule the IO manager writes with."""

    root: str = Field(description="Where the namespaces live: a local path or an object store URI.")
    storage_options: dict[str, str] | None = Field(
        default=None, description="Object store options (credentials, endpoint, region)."
    )

    def uri(self, asset_key: AssetKeyLike) -> str:
        """The namespace URI of ``asset_key``: ``<root>/<part 1>/.../<part n>`` (a local root
        made absolute). Raises :class:`InvalidAssetKeyError` for a key part that is not a safe
        directory name (see :func:`namespace_uri`)."""
        return namespace_uri(_value(self.root), as_asset_key(asset_key))

    @property
    def options(self) -> dict[str, str] | None:
        """The storage options, with values given as ``dg.EnvVar`` read from the environment."""
        if self.storage_options is None:
            return None
        return {k: _value(v) for k, v in self.storage_options.items()}

    def namespace(
        self, asset_key: AssetKeyLike, version: int | None = None
    ) -> PartitionedNamespace:
        """The namespace of ``asset_key`` (at manifest ``version``, else the latest). Raises
        :class:`~dagster_lance_partitioned.core.errors.NamespaceNotFoundError` when nothing was
        written there yet."""
        return PartitionedNamespace.open(self.uri(asset_key), self.options, version)

    def search(
        self,
        asset_key: AssetKeyLike,
        query: Any,
        *,
        column: str | None = None,
        k: int = 10,
        filter: FilterLike = None,
        columns: Sequence[str] | None = None,
        version: int | None = None,
        **params: Any,
    ) -> pa.Table:
        """The ``k`` best rows of ``asset_key``'s namespace for ``query`` across the
        partitions ``filter`` keeps (at manifest ``version``, else the latest): a vector gives
        the nearest rows with ``_distance``, a string full-text matches with ``_score``; see
        :meth:`PartitionedNamespace.search` (``column``, ``columns`` and ``params`` such as
        ``probes`` and ``refine_factor`` pass through)."""
        ns = self.namespace(asset_key, version)
        return ns.search(query, column=column, k=k, filter=filter, columns=columns, **params)

    def indexes(self, asset_key: AssetKeyLike, filter: FilterLike = None) -> list[IndexCoverage]:
        """The indexes ``asset_key``'s namespace declares, with their coverage over the
        partitions ``filter`` selects (see :meth:`PartitionedNamespace.indexes`)."""
        return self.namespace(asset_key).indexes(filter)

    def exists(self, asset_key: AssetKeyLike) -> bool:
        """Whether the namespace of ``asset_key`` exists."""
        try:
            self.namespace(asset_key)
        except NamespaceNotFoundError:
            return False
        return True


def as_asset_key(asset_key: AssetKeyLike) -> dg.AssetKey:
    """An asset key from a key, its user string (``"a/b"``) or its parts."""
    if isinstance(asset_key, dg.AssetKey):
        return asset_key
    if isinstance(asset_key, str):
        return dg.AssetKey.from_user_string(asset_key)
    return dg.AssetKey(list(asset_key))


def namespace_uri(root: str, asset_key: dg.AssetKey) -> str:
    """The namespace URI of ``asset_key`` under ``root``: ``<root>/<part 1>/.../<part n>``, each
    key part one directory, unchanged (a local ``root`` made absolute).

    A part must be non-empty and made of ASCII letters, digits, ``_`` and ``-``, with ``.``
    allowed only between them (``v1.2`` yes; ``.``, ``..``, ``.hidden``, ``a.`` no); any other
    part (``/``, ``\\``, ``:``, ``%``, whitespace, control characters, non-ASCII, ...) raises
    :class:`InvalidAssetKeyError`, so every namespace stays inside ``root``."""
    check_asset_key(asset_key)
    root = root.rstrip("/")
    if "://" not in root:
        root = os.path.abspath(root)
    return "/".join([root, *asset_key.path])


def check_not_nested(
    root: str, asset_key: dg.AssetKey, storage_options: dict[str, str] | None = None
) -> None:
    """Raise :class:`NestedAssetError` when the namespace of ``asset_key`` would lie inside the
    namespace of another asset under ``root`` (a ``__manifest`` at a shorter key), or another
    one inside it (a ``__manifest`` below its directory): keys ``a`` and ``a/b/c``. Checked
    before an asset's namespace is created: one look per shorter key and one listing below."""
    parts = list(asset_key.path)
    shown = asset_key.to_user_string()
    for depth in range(1, len(parts)):
        outer = dg.AssetKey(parts[:depth])
        manifest = join_uri(namespace_uri(root, outer), MANIFEST_DIR)
        if manifest_exists(manifest, storage_options):
            raise _nested(shown, outer.to_user_string(), inner=shown)
    uri = namespace_uri(root, asset_key)
    for f in list_files(uri, storage_options):
        segments = f.path.split("/")
        if MANIFEST_DIR in segments[1:]:
            below = segments[: segments.index(MANIFEST_DIR, 1)]
            inner = dg.AssetKey([*parts, *below]).to_user_string()
            raise _nested(shown, inner, inner=inner)


def _nested(asset: str, other: str, inner: str) -> NestedAssetError:
    outer = other if inner == asset else asset
    return NestedAssetError(
        f"asset {asset!r}: its namespace would nest {'inside' if inner == asset else 'around'} "
        f"the namespace of asset {other!r} (asset keys {outer!r} and {inner!r} are directories "
        "one inside the other under the IO manager root). Each asset needs a directory of its "
        "own: rename one key (e.g. give the shorter one a last part of its own, such as "
        f"'{outer}/all'), or store one under another root. Nothing was written.",
        asset,
        other,
    )


def check_asset_key(asset_key: dg.AssetKey) -> None:
    """Raise :class:`InvalidAssetKeyError` unless every part of ``asset_key`` is a safe
    directory name (see :func:`namespace_uri`)."""
    shown = repr(list(asset_key.path))
    if not asset_key.path:
        raise InvalidAssetKeyError(f"asset key {shown} has no parts", shown, "")
    for part in asset_key.path:
        if part == MANIFEST_DIR:
            raise InvalidAssetKeyError(
                f"asset key {shown}: part {part!r} is the name of a namespace's catalog table "
                "and cannot be a directory under the IO manager root. Nothing was read or "
                "written.",
                shown,
                part,
            )
        if isinstance(part, str) and _SAFE_KEY_PART.fullmatch(part):
            continue
        text = str(part)
        if text in ("", ".", ".."):
            why = "it is empty" if text == "" else f"{text!r} is a relative path step"
        elif "/" in text or "\\" in text:
            why = "it contains a path separator"
        elif ":" in text:
            why = "it contains ':', read as a URI scheme or a drive"
        elif any(ord(c) < 32 or ord(c) == 127 for c in text):
            why = "it contains a control character"
        else:
            why = "it has a character outside A-Z a-z 0-9 _ - or a leading, trailing or double '.'"
        raise InvalidAssetKeyError(
            f"asset key {shown}: part {part!r} cannot be a directory under the IO manager root "
            f"({why}); asset key parts must be letters, digits, '_' and '-', with '.' only "
            "between them. Nothing was read or written.",
            shown,
            text,
        )


def _value(text: str) -> str:
    """A configured string; a ``dg.EnvVar`` (a resource used outside a run, e.g. by the check
    and sensor factories) read from the environment."""
    if not isinstance(text, dg.EnvVar):
        return text
    value = text.get_value()
    if value is None:
        raise StorageRootError(
            f"environment variable {text.env_var_name} (configured as dg.EnvVar for the Lance "
            "resource) is not set",
            text.env_var_name,
        )
    return value
