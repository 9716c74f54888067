"""Fixtures shared by the test modules: the local Hub servers live in hub_fixtures."""

pytest_plugins = ["hub_fixtures"]
