"""Shared pytest configuration: service fixtures live in tests/service_fixtures.py (see its docstring).

Nothing here touches the database at import or autouse time, so tests/engine/ runs without one.
"""

pytest_plugins = ["tests.service_fixtures"]
