"""A public surface you can find: every error a user can meet and every type a public operation
returns is exported (``__all__``) by the top-level package or by its subpackage's
``__init__`` -- core errors and types by both ``dagster_lance_partitioned`` and
``dagster_lance_partitioned.core``, the Dagster layer's by ``.orchestration``, the Spark
layer's by ``.spark``, the CLI's by ``.cli``."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

import dagster_lance_partitioned as top
from dagster_lance_partitioned import cli, core, orchestration, spark
from dagster_lance_partitioned.core.namespace import PartitionedNamespace
from dagster_lance_partitioned.core.ops.groups import Inspect, Maintenance
from dagster_lance_partitioned.core.transaction import Transaction
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    LancePartitionedResource,
)

PACKAGE = top.__name__
LAYERS = {"core": core, "orchestration": orchestration, "spark": spark, "cli": cli}
# raised and caught inside the package, never reaching a caller
INTERNAL_EXCEPTIONS = {
    f"{PACKAGE}.core.expr.predicates.NotRenderable",  # a predicate SQL cannot express: pruned less
    f"{PACKAGE}.core.manifest.edit.NothingToCommit",  # a commit plan with nothing to change
}
# fields of returned dataclasses that carry internal state (not compared, not shown)
INTERNAL_FIELDS = {
    f"{PACKAGE}.core.read.planning.ScanPlan.snapshot",  # the manifest version the scan runs on
}
# the classes users call operations on
OPERATIONS = (
    PartitionedNamespace,
    Maintenance,
    Inspect,
    Transaction,
    LancePartitionedResource,
    LancePartitionedIOManager,
)
# type names of annotations that are not this package's
NOT_OURS = set(dir(builtins)) | set(typing.__all__) | {"Iterator", "Sequence", "Mapping"}


def _modules() -> list[ModuleType]:
    found = [top]
    for info in pkgutil.walk_packages(top.__path__, f"{PACKAGE}."):
        if info.name.endswith("__main__"):
            continue
        found.append(importlib.import_module(info.name))
    return found


MODULES = _modules()


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _exported_by(name: str, layer: str | None) -> list[ModuleType]:
    """The packages exporting the ``name`` of a ``layer`` are expected to export it from."""
    if layer in (None, "core"):
        return [top, core]
    return [LAYERS[layer]]


def _is_exported(obj: type, packages: list[ModuleType]) -> bool:
    return all(
        obj.__name__ in getattr(p, "__all__", ()) and getattr(p, obj.__name__, None) is obj
        for p in packages
    )


def _defined_exceptions() -> Iterator[type[BaseException]]:
    for module in MODULES:
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
                and f"{module.__name__}.{name}" not in INTERNAL_EXCEPTIONS
            ):
                yield obj


EXCEPTIONS = sorted(_defined_exceptions(), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_error_is_found():
    assert len(EXCEPTIONS) > 40
    names = {c.__name__ for c in EXCEPTIONS}
    assert {"StorageError", "MergeKeyError", "DuplicateKeyError", "SparkOptionError"} <= names


@pytest.mark.parametrize("error", EXCEPTIONS, ids=lambda c: c.__name__)
def test_every_error_is_exported(error: type[BaseException]):
    packages = _exported_by(error.__name__, _layer(error.__module__))
    assert _is_exported(error, packages), (
        f"{error.__module__}.{error.__name__} is not in the __all__ of "
        f"{', '.join(p.__name__ for p in packages)}"
    )


# -- the types public operations return ------------------------------------------------------
def _public_callables(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            member = member.fget
        member = getattr(member, "__func__", member)  # classmethod / staticmethod
        if callable(member):
            yield f"{cls.__qualname__}.{name}", member


def _surface() -> Iterator[tuple[str, str | None, Callable[..., Any]]]:
    """(qualified name, layer, callable) of every public operation: the methods of the classes
    users call operations on, and the exported functions."""
    for package in (top, orchestration, spark, cli):
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isfunction(obj) and obj.__module__.startswith(PACKAGE):
                yield f"{obj.__module__}.{name}", _layer(obj.__module__), obj
    for cls in OPERATIONS:
        for qualname, fn in _public_callables(cls):
            yield f"{cls.__module__}.{qualname}", _layer(cls.__module__), fn


def _defining_module(fn: Callable[..., Any]) -> ModuleType:
    fn = inspect.unwrap(fn)
    return importlib.import_module(fn.__module__)


def _by_name(name: str, module: ModuleType) -> type | None:
    """The class ``name`` means in ``module`` (or, imported only for type checking, the one
    class of that name the package defines); None for a type alias."""
    if name in vars(module):  # a class, or a type alias (``WriteMode``)
        obj = vars(module)[name]
        return obj if inspect.isclass(obj) else None
    found = {
        vars(m)[name]
        for m in MODULES
        if inspect.isclass(vars(m).get(name)) and vars(m)[name].__module__ == m.__name__
    }
    assert len(found) <= 1, f"{name} (in {module.__name__}): defined {len(found)} times"
    return found.pop() if found else None


def _named_types(annotation: Any, module: ModuleType) -> Iterator[type]:
    """This package's classes an annotation names (strings parsed: ``from __future__ import
    annotations``); ``pa.Table`` and other dotted names are other packages'."""
    if annotation is None or annotation is inspect.Signature.empty:
        return
    if not isinstance(annotation, str):  # evaluated (a module without postponed annotations)
        if inspect.isclass(annotation) and annotation.__module__.startswith(PACKAGE):
            yield annotation
        for arg in typing.get_args(annotation):
            yield from _named_types(arg, module)
        return
    tree = ast.parse(annotation, mode="eval")
    dotted = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in NOT_OURS and id(node) not in dotted:
            cls = _by_name(node.id, module)
            if cls is not None and cls.__module__.startswith(PACKAGE):
                yield cls


def _held_types(cls: type) -> Iterator[type]:
    """This package's classes a returned value holds one level down: its dataclass fields
    and the values of its public properties."""
    module = importlib.import_module(cls.__module__)
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name.startswith("_") or f"{cls.__module__}.{cls.__name__}.{f.name}" in (
                INTERNAL_FIELDS
            ):
                continue
            yield from _named_types(f.type, module)
    for name, member in vars(cls).items():
        if isinstance(member, property) and not name.startswith("_"):
            yield from _named_types(member.fget.__annotations__.get("return"), module)


def _returned() -> dict[type, set[tuple[str, str | None]]]:
    """Each returned type of this package: the operations returning it (and their layers)."""
    out: dict[type, set[tuple[str, str | None]]] = {}
    for qualname, layer, fn in _surface():
        module = _defining_module(fn)
        annotation = inspect.unwrap(fn).__annotations__.get("return")
        for cls in _named_types(annotation, module):
            out.setdefault(cls, set()).add((qualname, layer))
            for held in _held_types(cls):
                out.setdefault(held, set()).add((f"{qualname} -> {cls.__name__}", layer))
    return out


RETURNED = _returned()


def test_the_returned_types_are_found():
    names = {c.__name__ for c in RETURNED}
    assert {"WriteResult", "RowChangeResult", "Commit", "ScanPlan", "CompactResult"} <= names


@pytest.mark.parametrize(
    "returned", sorted(RETURNED, key=lambda c: f"{c.__module__}.{c.__name__}"), ids=str
)
def test_every_returned_type_is_exported(returned: type):
    """Exported by the top-level package or by the subpackage of every operation returning it
    (a core type returned by the Spark layer is found in the core)."""
    for qualname, layer in sorted(RETURNED[returned], key=str):
        where = [top] if _layer(returned.__module__) in (None, "core") else []
        where += [LAYERS[layer]] if layer is not None else []
        assert any(_is_exported(returned, [p]) for p in where), (
            f"{returned.__module__}.{returned.__name__}, returned by {qualname}, is not in the "
            f"__all__ of {' or '.join(p.__name__ for p in where)}"
        )


def test_every_all_name_exists():
    for package in (top, core, orchestration, spark, cli):
        missing = [n for n in package.__all__ if not hasattr(package, n)]
        assert not missing, (package.__name__, missing)
        assert len(set(package.__all__)) == len(package.__all__), package.__name__


def test_one_definition_per_public_class_name():
    """One ``MergeOptions``, one ``TableChange``: a public name means one class."""
    defined: dict[str, list[str]] = {}
    for module in MODULES:
        for name, obj in vars(module).items():
            ours = inspect.isclass(obj) and obj.__module__ == module.__name__
            if ours and not name.startswith("_"):
                defined.setdefault(name, []).append(module.__name__)
    twice = {name: where for name, where in defined.items() if len(where) > 1}
    assert not twice


def test_merge_options_are_the_cores():
    from dagster_lance_partitioned.core.row_changes.merge import MergeOptions

    assert orchestration.MergeOptions is MergeOptions
    assert top.MergeOptions is MergeOptions and core.MergeOptions is MergeOptions
    options = MergeOptions("id", "ignore")  # positional as before; one key column as a name
    assert options.on == ("id",) and not options.update and options.insert
    assert options == MergeOptions(("id",), when_matched="ignore")
    with pytest.raises(top.WriteError, match="when_not_matched_by_source"):
        MergeOptions(("id",), when_not_matched_by_source="drop")
    # the one way to say a merge: MergeRequest is gone
    assert MergeOptions.of(options) is options and MergeOptions.of(["id"]) == MergeOptions("id")
    assert not hasattr(orchestration, "MergeRequest")
