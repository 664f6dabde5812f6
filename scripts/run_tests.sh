#!/usr/bin/env bash
# Installs everything into .venv, then runs the linter, the type checker, the documentation build
# (mkdocs, strict: broken links and docstring errors fail it) and the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
# Azurite (Azure Storage emulator, npm) for the az:// tests, which skip without it
AZURITE_VERSION=3.37.0
if command -v node >/dev/null && command -v npm >/dev/null \
  && [ ! -f "$VENV/azurite/.installed-$AZURITE_VERSION" ]; then
  if npm install --prefix "$VENV/azurite" --no-audit --no-fund --loglevel=error \
    "azurite@$AZURITE_VERSION"; then
    touch "$VENV/azurite/.installed-$AZURITE_VERSION"
  else
    echo "azurite could not be installed: the az:// tests will be skipped" >&2
  fi
fi
ruff check .
ruff format --check .
mypy
SITE="$(mktemp -d)"  # the documentation site is built into a scratch directory, not the repository
mkdocs build --strict --quiet --site-dir "$SITE"
rm -rf "$SITE"
# every tier but the slow soak loops (this -m overrides the fast tier of pyproject's addopts)
python -m pytest -q -m 'not slow' "$@"
