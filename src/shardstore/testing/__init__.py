"""Test batteries shipped with shardstore (need pytest): ``StoreTests`` for any Store."""

import pytest

# detailed assertion messages inside the battery, as in a test module
pytest.register_assert_rewrite("shardstore.testing.store_tests")

from .store_tests import StoreTests, async_test  # noqa: E402

__all__ = ["StoreTests", "async_test"]
