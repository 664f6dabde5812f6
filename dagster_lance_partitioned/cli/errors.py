"""Errors of the command line."""

from __future__ import annotations


class CliError(Exception):
    """An error the CLI reports itself, as the package's errors: message on stderr, exit 1."""
