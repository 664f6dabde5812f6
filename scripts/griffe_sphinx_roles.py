"""A griffe extension for the documentation site (``mkdocs.yml``, mkdocstrings' ``extensions``):
the Sphinx roles of the package's docstrings (``:class:`~.x.Name```) rendered as what Sphinx
shows, in code, linked to the object's page when the API reference documents it (an optional
cross-reference: a target the site does not render stays plain code, without a warning)."""

from __future__ import annotations

import html
from typing import Any

import griffe

from dagster_lance_partitioned._roles import replace_roles


class SphinxRoles(griffe.Extension):
    """Replaces the roles of every docstring once the package is loaded."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.is_alias or obj.docstring is None or ":`" not in obj.docstring.value:
            return
        docstring = obj.docstring

        def render(role: str, target: str, shown: str) -> str:
            code = f"<code>{html.escape(shown)}</code>"
            path = _resolve(obj, target, loader)
            if path is None:
                return code
            return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

        docstring.value = replace_roles(docstring.value, render)


def _resolve(obj: griffe.Object, target: str, loader: griffe.GriffeLoader) -> str | None:
    """The path of the object ``target`` names from ``obj``'s docstring, as Sphinx finds it:
    a name in ``obj``'s scope, an absolute path, or (a leading ``.``) a path relative to
    ``obj``'s module or one of its packages, else any object whose path ends with it."""
    collection = loader.modules_collection
    if target.startswith("."):
        rest = target[1:]
        module = obj if obj.is_module else obj.module
        parts = module.path.split(".")
        candidates = [".".join([*parts[:i], rest]) for i in range(len(parts), 0, -1)]
    else:
        head, _, tail = target.partition(".")
        candidates = [target]
        try:
            base = obj.resolve(head)
            candidates.insert(0, f"{base}.{tail}" if tail else base)
        except (griffe.NameResolutionError, ValueError):
            pass
        rest = target
    for path in candidates:
        found = _lookup(collection, path)
        if found is not None:
            return found
    root = obj.package
    return _suffix(root, "." + rest)


def _lookup(collection: griffe.ModulesCollection, path: str) -> str | None:
    try:
        found = collection.get_member(path)
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    try:
        return str(found.final_target.path if found.is_alias else found.path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return str(found.path)


def _suffix(root: griffe.Object, suffix: str) -> str | None:
    """The one object under ``root`` whose path ends with ``suffix`` (None for none or
    several)."""
    found: set[str] = set()
    pending = [root]
    while pending:
        current = pending.pop()
        for member in current.members.values():
            if member.is_alias:
                continue
            if member.path.endswith(suffix):
                found.add(member.path)
            if member.is_module or member.is_class:
                pending.append(member)
    return found.pop() if len(found) == 1 else None
