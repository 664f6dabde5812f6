"""Sphinx cross-reference roles (``:class:`~.x.Name```, ``:meth:`indexes```) in text shown
as Markdown: the package's docstrings use them, and both the documentation site (through
mkdocstrings) and Dagster's UI (asset descriptions) read Markdown, where a role would show
as ``:class:`` followed by a code span. A role becomes what Sphinx shows for it, as code:
the last name of a ``~`` target, the target without a leading ``.``, the title of a
``Title <target>`` role, ``()`` after a function or method."""

from __future__ import annotations

import re
from collections.abc import Callable

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|data|func|meth|mod|attr|exc|obj|const|type):`(?P<target>[^`]+)`"
)
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_CALLABLE = ("func", "meth")

Render = Callable[[str, str, str], str]  # (role, target, shown) -> the replacement


def role_target(target: str) -> str:
    """The object a role names (its target without ``~``, ``!`` and title)."""
    titled = _TITLED.match(target.strip())
    name = titled.group("target") if titled else target.strip()
    return name.lstrip("~!")


def role_shown(role: str, target: str) -> str:
    """What Sphinx shows for ``:role:`target```: ``Name`` for ``~a.b.Name``, ``b.Name`` for
    ``.b.Name``, the title of ``Title <target>``, with ``()`` after functions and methods."""
    target = target.strip()
    titled = _TITLED.match(target)
    if titled:
        return titled.group("title")
    name = target.lstrip("!")
    if name.startswith("~"):
        name = name[1:].rsplit(".", 1)[-1]
    name = name.lstrip(".")
    return name + "()" if role in _CALLABLE and not name.endswith(")") else name


def code_span(text: str) -> str:
    """``text`` as a Markdown code span."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def replace_roles(text: str, render: Render | None = None) -> str:
    """``text`` with every role replaced by ``render(role, target, shown)`` (default: what
    Sphinx shows, as a Markdown code span)."""

    def rendered(match: re.Match[str]) -> str:
        role, target = match.group("role"), match.group("target")
        shown = role_shown(role, target)
        return render(role, role_target(target), shown) if render else code_span(shown)

    return ROLE.sub(rendered, text)
