"""Running the CLI in-process from the CLI tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dagster_lance_partitioned.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``main(argv)``; returns (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run ``main([*argv, "--json"])`` expecting success; returns the parsed stdout."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)
