"""The error boundary of the public operations: raw Lance / Arrow failures become
:class:`StorageError` naming the namespace, what was being done and the file."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import is_storage_failure, storage_error

F = TypeVar("F", bound=Callable[..., Any])


def storage_boundary(what: str) -> Callable[[F], F]:
    """Raw Lance / Arrow failures of the decorated method become :class:`StorageError` naming
    the namespace (the ``uri`` of the object, or the first argument of a classmethod), what was
    being done and the file (no Rust source locations)."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def guarded(first: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(first, *args, **kwargs)
            except Exception as e:
                if not is_storage_failure(e):
                    raise
                if isinstance(first, type):  # a classmethod: the namespace is its argument
                    where = os.fspath(args[0] if args else kwargs.get("uri", "?"))
                else:
                    where = first.uri
                raise storage_error(e, where, what) from None

        return guarded  # type: ignore[return-value]

    return decorate
