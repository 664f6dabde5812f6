"""Sphinx roles (``:class:`~.x.Name```) never reach a reader raw: the API reference renders
them (the griffe extension ``mkdocs.yml`` gives mkdocstrings: what Sphinx shows, in code, linked
to the object when the reference documents it), and what the package hands Dagster to show
(asset descriptions through the component, the resources' descriptions) is Markdown without
them. The package's own docstrings are loaded by griffe as mkdocstrings loads them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import dagster as dg
import griffe
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from dagster_lance_partitioned._roles import ROLE, replace_roles, role_shown
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    LancePartitionedResource,
)
from dagster_lance_partitioned.orchestration.component import LancePartitionedComponent

# Dagster's component loader itself uses its beta code-reference and owners APIs
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dagster_lance_partitioned"


@pytest.mark.parametrize(
    ("role", "target", "shown"),
    [
        ("class", "~.resource.LancePartitionedResource", "LancePartitionedResource"),
        ("class", ".Maintenance", "Maintenance"),
        ("mod", ".manifest.retire", "manifest.retire"),
        ("meth", "PartitionedNamespace.indexes", "PartitionedNamespace.indexes()"),
        ("func", "~.storage.check_table_dir", "check_table_dir()"),
        ("data", "FEATURES", "FEATURES"),
        ("class", "the resource <~.resource.LancePartitionedResource>", "the resource"),
    ],
)
def test_a_role_shows_what_sphinx_shows(role, target, shown):
    assert role_shown(role, target) == shown
    assert replace_roles(f"see :{role}:`{target}`.") == f"see `{shown}`."


def test_fields_and_plain_code_are_left_alone():
    text = ":param x: the ``x`` value; :returns: `y`"
    assert replace_roles(text) == text


def _extensions() -> list[str]:
    config = (ROOT / "mkdocs.yml").read_text()
    config = "\n".join(line for line in config.splitlines() if "!!python" not in line)
    handler = yaml.safe_load(config)["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    return list(handler["options"]["extensions"])


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    out = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            out += _objects(member)
    return out


def test_the_api_reference_renders_every_role():
    """Every docstring of the package, loaded with the site's extensions: no role left; one
    to an object the reference documents becomes an optional cross-reference to it."""
    (extension,) = _extensions()
    path, _, name = extension.partition(":")
    loaded = griffe.load(
        PACKAGE,
        search_paths=[str(ROOT)],
        extensions=griffe.load_extensions({str(ROOT / path) + ":" + name: {}}),
        docstring_parser="sphinx",
    )
    objects = _objects(loaded)
    assert len(objects) > 500
    left = [o.path for o in objects if o.docstring is not None and ROLE.search(o.docstring.value)]
    assert left == []
    maintenance = loaded["core.namespace.PartitionedNamespace.maintenance"].docstring
    assert (
        '<autoref identifier="dagster_lance_partitioned.core.ops.groups.Maintenance" optional>'
        "<code>Maintenance</code></autoref>"
    ) in maintenance.value


ROLES_ASSETS = '''
import dagster as dg
import pyarrow as pa

FEATURES = ("hour", "delay")


@dg.asset
def scored() -> pa.Table:
    """Rows with :data:`FEATURES` (see :func:`~.helpers.score` and :class:`pyarrow.Table`)."""
    return pa.table({"n": [1]})
'''


def test_what_dagster_shows_has_no_roles(tmp_path):
    """The component's assets, checks, sensors, job and schedule, and the resources'
    descriptions (the class docstrings Dagster shows)."""
    with create_defs_folder_sandbox() as sandbox:
        src = sandbox.project_root / "src" / sandbox.project_name
        (src / "roles_assets.py").write_text(textwrap.dedent(ROLES_ASSETS))
        path = sandbox.scaffold_component(component_cls=LancePartitionedComponent)
        attributes = {
            "root": str(tmp_path / "lake"),
            "assets_module": f"{sandbox.project_name}.roles_assets",
            "maintenance_cron": "0 3 * * *",
        }
        (path / "defs.yaml").write_text(
            yaml.safe_dump(
                {"type": f"{LancePartitionedComponent.__module__}.LancePartitionedComponent"}
                | {"attributes": attributes}
            )
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
            graph = defs.resolve_asset_graph()
            scored = graph.get(dg.AssetKey("scored"))
            assert scored.description == (
                "Rows with `FEATURES` (see `score()` and `pyarrow.Table`)."
            )
            texts = [n.description for n in graph.asset_nodes]
            checks = list(defs.asset_checks or [])
            assert checks
            texts += [c.node_def.description for c in checks]
            texts += [spec.description for c in checks for spec in c.check_specs]
            texts += [s.description for s in defs.sensors or []]
            texts += [j.description for j in defs.jobs or [] if isinstance(j, dg.JobDefinition)]
            texts += [s.description for s in defs.schedules or []]
    texts += [
        LancePartitionedIOManager(root=str(tmp_path)).get_resource_definition().description,
        LancePartitionedResource(root=str(tmp_path)).get_resource_definition().description,
        LancePartitionedComponent.__doc__,
    ]
    assert [t for t in texts if t and ROLE.search(t)] == []
