#!/usr/bin/env bash
# Installs everything into .venv, then runs the linter and the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ruff check .
ruff format --check .
python -m pytest -q "$@"
