"""Column names battery: the names a namespace accepts (each must round-trip through write, read,
filters, merges and Spark) and the ones it refuses at ``create`` / ``add_columns`` /
``rename_column`` (Lance cannot write or read them back), with why (the SchemaError says it)."""

from __future__ import annotations

# label -> name; every one must round-trip (tests/core/test_bad_input.py, tests/spark)
ACCEPTED: dict[str, str] = {
    "space": "my col",
    "dash": "my-col",
    "dollar": "my$col",
    "double_quote": 'my"col',
    "single_quote": "my'col",
    "unicode": "côté_名",
    "emoji": "😀",
    "leading_digit": "1col",
    "hash": "my#col",
    "slash": "my/col",
    "backslash": "my\\col",
    "newline": "my\ncol",
    "tab": "my\tcol",
    "control_char": "a\x01b",
    "brackets": "my[0]",
    "colon": "my:col",
    "parentheses": "f(x)",
    "comma": "a,b",
    "semicolon": "a;b",
    "sql_comment": "a--b /* c */",
    "keyword": "select",
    "operator": "a=b",
    "percent": "a%b",
    "star_in_name": "a*",
    "blank": " ",
    "leading_space": " x",
    "upper_case": "MyCol",
    "reserved_other_case": "_ROWID",
    "lance_search_column": "_distance",
    "long": "c" * 300,
}

# label -> (name, what the SchemaError says): refused at any depth (top level and nested)
REFUSED_EVERYWHERE: dict[str, tuple[str, str]] = {
    "empty": ("", "empty"),
    "dot": ("my.col", "'.'"),
    "backtick": ("my`col", "backtick"),
    "nul": ("a\x00b", "NUL"),
}

# label -> (name, what the SchemaError says): refused as top-level column names only
REFUSED_TOP_LEVEL: dict[str, tuple[str, str]] = {
    **REFUSED_EVERYWHERE,
    "star": ("*", "'\\*'"),
    "rowid": ("_rowid", "reserved"),
    "rowaddr": ("_rowaddr", "reserved"),
    "rowoffset": ("_rowoffset", "reserved"),
    "row_created": ("_row_created_at_version", "reserved"),
    "row_updated": ("_row_last_updated_at_version", "reserved"),
}
