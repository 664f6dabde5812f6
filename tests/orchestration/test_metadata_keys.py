"""Every ``lance/...`` Dagster metadata key (and tag) of the package is spelled once, in
orchestration/metadata_keys.py: a string literal starting with ``lance/`` anywhere else in the
package source fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster_lance_partitioned
from dagster_lance_partitioned.orchestration import metadata_keys

ROOT = Path(dagster_lance_partitioned.__file__).resolve().parent
KEYS_MODULE = ROOT / "orchestration" / "metadata_keys.py"


def _literals(source: str) -> list[tuple[int, str]]:
    """The string literals (also the literal parts of f-strings) starting with ``lance/``."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(metadata_keys.PREFIX)
    ]


def test_the_scan_finds_keys_in_literals_and_f_strings():
    source = 'a = {"lance/x": 1}\nb = f"lance/run_{name}"\n"""lance/doc"""\nc = "see lance/y"\n'
    assert sorted(_literals(source)) == [(1, "lance/x"), (2, "lance/run_"), (3, "lance/doc")]


def test_lance_keys_are_spelled_only_in_metadata_keys():
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {value!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != KEYS_MODULE
        for line, value in _literals(path.read_text(encoding="utf-8"))
    ]
    assert not found, "use the constants of orchestration/metadata_keys.py:\n" + "\n".join(found)


def test_every_key_is_a_distinct_lance_key_with_a_docstring():
    tree = ast.parse(KEYS_MODULE.read_text(encoding="utf-8"))
    body = tree.body
    values: dict[str, str] = {}
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        value = getattr(metadata_keys, name)
        assert isinstance(value, str) and value.startswith("lance/"), name
        following = body[i + 1] if i + 1 < len(body) else None
        assert (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ), f"{name} has no docstring line"
        assert value not in values.values(), f"{name} repeats {value!r}"
        values[name] = value
    assert set(values) <= set(metadata_keys.__all__)
    assert len(values) >= 30


def test_a_multi_key_run_total_is_named_lance_run():
    assert metadata_keys.scoped(metadata_keys.BYTES_WRITTEN, False) == "lance/bytes_written"
    assert metadata_keys.scoped(metadata_keys.BYTES_WRITTEN, True) == "lance/run_bytes_written"
    assert metadata_keys.scoped(metadata_keys.RUN_ROWS_WRITTEN, True) == "lance/run_rows_written"
