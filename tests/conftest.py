"""Shared test fixtures: where ../shared/data is, and skips when it is absent."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_DATA = SHARED / "data"
SPIDER = SHARED_DATA / "spider_dev"


@pytest.fixture
def spider_root() -> Path:
    """Path of ../shared/data/spider_dev; skips the test when it is absent."""
    if not (SPIDER / "dev.json").is_file():
        pytest.skip("real data absent: ../shared/data/spider_dev/dev.json not found")
    return SPIDER


@pytest.fixture
def shared_data() -> Path:
    """Path of ../shared/data; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("real data absent: ../shared/data not found")
    return SHARED_DATA
