"""Shared test fixtures: where the real data is, and skipping when it is absent."""
import pathlib

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data():
  """Path to ../shared/data; skips the test when it is absent (a user's fresh clone)."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"real data not found at {SHARED_DATA} (it lives beside the project, never in it)")
  return SHARED_DATA
