"""Helpers shared by the test folders (imported as ``helpers.<module>``; ``tests/`` is on
``pythonpath``)."""
