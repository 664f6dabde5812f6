"""The code location: every definition under ``defs/`` (the Lance component in
``defs/lake/defs.yaml``, the Spark resource, the schedules), as ``dg dev``, ``dg check defs`` and
``dagster dev -w workspace.yaml`` load it."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """The project's definitions, loaded from its ``defs`` folder."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
