"""What the benchmarks print about the software they ran on."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Iterable


def installed_versions(dists: Iterable[str]) -> dict[str, str]:
    """Python's version and each distribution's installed version ("not installed")."""
    out = {"python": platform.python_version()}
    for dist in dists:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
