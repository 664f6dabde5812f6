#!/usr/bin/env bash
# Installs everything into .venv, then runs the linter, the type checker and the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ruff check .
ruff format --check .
mypy
python -m pytest -q "$@"
