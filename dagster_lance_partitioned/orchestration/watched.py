"""The namespaces a sensor or check watches: each asset's key, namespace URI and partition layout,
as the IO manager stores it (located through :class:`~.resource.LancePartitionedResource`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from ..core import NamespaceNotFoundError, PartitionedNamespace
from .indexes import IndexRequest, index_requests
from .io_manager import LancePartitionedIOManager
from .layout import Layout
from .metadata_keys import INDEXES
from .resource import LancePartitionedResource

Lake = LancePartitionedResource | LancePartitionedIOManager  # where the factories find namespaces


@dataclass(frozen=True)
class WatchedAsset:
    """One asset stored by the IO manager (``indexes``: those its ``lance/indexes`` metadata
    declares)."""

    key: dg.AssetKey
    uri: str
    partitions_def: dg.PartitionsDefinition | None
    layout: Layout | None
    storage_options: dict[str, str] | None
    indexes: tuple[IndexRequest, ...] = ()

    def open(self, version: int | None = None) -> PartitionedNamespace | None:
        """The namespace (None when nothing was written yet)."""
        try:
            return PartitionedNamespace.open(self.uri, self.storage_options, version)
        except NamespaceNotFoundError:
            return None

    def key_of(self, ns: PartitionedNamespace, spec_id: int, values: dict[str, Any]) -> str | None:
        """The Dagster partition key of a partition of the namespace; None for partitions of
        older spec versions (another partitioning) and for unpartitioned assets."""
        if self.layout is None or spec_id != ns.current_spec.spec_id:
            return None
        return self.layout.key_of(list(values.values()))


def lance_resource(lake: Lake) -> LancePartitionedResource:
    """The resource locating the namespaces of ``lake`` (a resource, or an IO manager's)."""
    return lake.resource if isinstance(lake, LancePartitionedIOManager) else lake


def watched_assets(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec], lake: Lake
) -> list[WatchedAsset]:
    """The assets (every key of multi-assets) with their namespaces. A malformed
    ``lance/indexes`` raises :class:`~.errors.IndexMetadataError` naming the asset and the
    entry, so the definitions do not load with it."""
    resource = lance_resource(lake)
    options = resource.options
    out = []
    for a in assets:
        specs = list(a.specs) if isinstance(a, dg.AssetsDefinition) else [a]
        for spec in specs:
            pdef = spec.partitions_def
            meta = dict(spec.metadata or {})
            layout = (
                Layout.of(spec.key.to_user_string(), pdef, meta.get("partition_expr"))
                if (pdef is not None)
                else None
            )
            name = spec.key.to_user_string()
            indexes = index_requests(name, meta.get(INDEXES))
            out.append(
                WatchedAsset(spec.key, resource.uri(spec.key), pdef, layout, options, indexes)
            )
    return out
