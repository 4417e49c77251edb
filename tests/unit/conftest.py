"""Shared fixtures for the fast tier: the shipped catalog, loaded once."""

from __future__ import annotations

import pytest

from migctl.core.hardware.catalog import Catalog, load_catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()
