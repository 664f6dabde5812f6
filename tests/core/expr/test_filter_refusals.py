"""A filter is a predicate only: statement clauses, comments, subqueries, aggregates and
unbalanced text are refused with FilterError naming the clause and the filter, before any
data is read or changed; the same words inside literals and quoted identifiers still work."""

from __future__ import annotations

import pytest
from helpers.data import SCHEMA, fingerprint, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.expr.filters import FilterError

# partition values that look like SQL: they must stay filterable as literals
TRICKY = ("US", "LIMIT 1 -- x", "a UNION b /* c */; ORDER BY (")
ENTRY_POINTS = ("plan_scan", "to_table", "count_rows", "maintenance.drop_partitions")


@pytest.fixture
def ns(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(countries=TRICKY))
    return ns


def _call(ns: PartitionedNamespace, entry: str, flt):
    target = ns
    for name in entry.split("."):  # ns.maintenance.drop_partitions
        target = getattr(target, name)
    return target(flt)


def _rows(ns: PartitionedNamespace, flt) -> list[int]:
    return sorted(ns.to_table(filter=flt)["id"].to_pylist())


def _ids(country: str) -> list[int]:
    table = sample_table(countries=TRICKY)
    return sorted(r["id"] for r in table.to_pylist() if r["country"] == country)


# (refused filter, clause the message names, accepted filter using the same words, its rows)
CASES = [
    ("country = 'US' LIMIT 1", "LIMIT", "country = 'LIMIT 1 -- x'", _ids("LIMIT 1 -- x")),
    ("country = 'US' OFFSET 1", "OFFSET", "country LIKE '%LIMIT 1%'", _ids("LIMIT 1 -- x")),
    ("country = 'US' ORDER BY id", "ORDER BY", "country LIKE '%ORDER BY (%'", _ids(TRICKY[2])),
    ("country = 'US' GROUP BY id", "GROUP BY", "country <> 'GROUP BY id'", list(range(12))),
    ("country = 'US' -- comment", "comment", [("country", "=", "LIMIT 1 -- x")], _ids(TRICKY[1])),
    ("country = 'US' /* LIMIT 1 */", "comment", "country LIKE '%/* c */%'", _ids(TRICKY[2])),
    ("country = 'US' /* x */ LIMIT 1", "comment", "country IN ('US', '/*')", _ids("US")),
    ("country = 'US' UNION SELECT 1", "UNION", "country LIKE '%UNION%'", _ids(TRICKY[2])),
    ("country = 'US' UNION ALL SELECT 1", "UNION", "`country` LIKE '%UNION%'", _ids(TRICKY[2])),
    ("country = 'US' INTERSECT SELECT 1", "INTERSECT", "country != 'INTERSECT'", list(range(12))),
    ("country = 'US' EXCEPT SELECT 1", "EXCEPT", "country IS NOT NULL", list(range(12))),
    ("country = 'US'; DROP TABLE x", "semicolon", "country LIKE '%; ORDER%'", _ids(TRICKY[2])),
    ("country = 'US';", "semicolon", [("country", "in", ["US", ";"])], _ids("US")),
    ("id IN (SELECT 1)", "subquery", "id IN (1, 2)", [1, 2]),
    ("EXISTS (SELECT 1)", "subquery", "country = 'EXISTS (SELECT 1)' OR id = 0", [0]),
    ("id > (SELECT 10)", "subquery", "id > 10", [11]),
    ("WHERE country = 'US'", "WHERE", "country = 'US' AND id >= 0", _ids("US")),
    ("country = 'US' WHERE id = 1", "WHERE", "country = 'WHERE'", []),
    ("country = 'US' HAVING count(*) > 1", "HAVING", "country = 'HAVING count(*) > 1'", []),
    ("country = 'US' JOIN other ON true", "JOIN", "country LIKE 'a%'", _ids(TRICKY[2])),
    ("count(*) > 1", "aggregate", "length(country) < 3", _ids("US")),
    ("sum(value) > 1 AND country = 'US'", "aggregate", "abs(value) > 10", [11]),
    ("row_number() OVER () > 1", "window", "country = 'row_number() OVER ()'", []),
    ("country = 'US' WINDOW w AS ()", "WINDOW", "id BETWEEN 2 AND 3", [2, 3]),
    ("(country = 'US'", "parenthes", "(country = 'US')", _ids("US")),
    ("country = 'US')", "parenthes", "country = ')'", []),
    ("id = 1) UNION SELECT (1", "parenthes", "((id = 1))", [1]),
    ("country = 'US", "unterminated", "country = 'U''S'", []),
    ("`country = 'US'", "unterminated", "`country` = 'US'", _ids("US")),
    ("country = $$US", "unterminated", "country = $$US$$", _ids("US")),
    ("country = $$US$$ -- x", "comment", "country = $$LIMIT 1 -- x$$", _ids(TRICKY[1])),
    ("country = E'US\\'' -- x", "comment", "country = E'LIMIT 1 -- x'", _ids(TRICKY[1])),
    ("id = $1", "placeholder", "country = '$1'", []),
]
IDS = [c[0] if isinstance(c[0], str) else repr(c[0]) for c in CASES]


@pytest.mark.parametrize(("refused", "clause", "accepted", "expected"), CASES, ids=IDS)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_clause_is_refused_and_nothing_changes(ns, entry, refused, clause, accepted, expected):
    before = fingerprint(ns.uri)
    with pytest.raises(FilterError) as info:
        _call(ns, entry, refused)
    message = str(info.value)
    assert f"{refused!r} is not a single predicate" in message
    assert clause.lower() in message.replace(repr(refused), "").lower()
    assert fingerprint(ns.uri) == before
    # the same words inside a literal, a quoted identifier or a tuple value are an ordinary filter
    assert _rows(ns, accepted) == expected


def test_drop_partitions_with_a_set_operation_drops_nothing(ns):
    """``INTERSECT SELECT 1`` used to be planned as the filter before it and drop a partition."""
    before = fingerprint(ns.uri)
    with pytest.raises(FilterError, match="INTERSECT"):
        ns.maintenance.drop_partitions("country = 'US' INTERSECT SELECT 1")
    assert fingerprint(ns.uri) == before
    dropped = ns.maintenance.drop_partitions("country = 'US'")
    assert [p.values for p in dropped.partitions] == [{"country": "US"}]


def test_refusal_comes_before_the_lance_scanner_sees_the_filter(ns):
    """A UNION used to reach the per-partition scan and fail there with a bare ValueError."""
    with pytest.raises(FilterError, match="UNION"):
        ns.scan("country = 'US' UNION SELECT 1").read_all()
    assert ns.count_rows([("country", "=", "a UNION b /* c */; ORDER BY (")]) == len(
        _ids(TRICKY[2])
    )


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ("lower(country) = 'us'", _ids("US")),
        ("length(country) = 12", _ids(TRICKY[1])),
        ("country = upper('us') OR abs(id) = 1", sorted([*_ids("US"), 1])),
        ("country ILIKE 'us'", _ids("US")),
        ("country = x'5553'", _ids("US")),
        (
            "country ILIKE 'limit%' OR country ILIKE 'A union%'",
            sorted(_ids(TRICKY[1]) + _ids(TRICKY[2])),
        ),
    ],
)
def test_function_calls_and_ilike_are_ordinary_predicates(ns, flt, expected):
    """Function calls used to fail with a raw ValueError while pruning, binary literals while
    translating the filter for Lance, and ILIKE pruned as a case-sensitive LIKE (dropping the
    partitions it matches)."""
    assert _rows(ns, flt) == expected
    assert ns.count_rows(flt) == len(expected)
