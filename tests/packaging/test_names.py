"""Names that say what a thing is: no function of the package is called after a count or a
placeholder (``one``, ``f``, ``do``, ``helper``), and no folder reads as a test folder."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster_lance_partitioned

ROOT = Path(dagster_lance_partitioned.__file__).resolve().parent
VAGUE = {"one", "f", "g", "do", "helper", "func", "fn", "run_one"}


def test_no_function_is_named_vaguely():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in VAGUE:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not found, found


def test_no_folder_is_named_like_tests():
    folders = {p.name for p in ROOT.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    assert not folders & {"spec", "specs", "test", "tests", "__tests__"}, folders
