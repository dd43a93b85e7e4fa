"""The fast tier (`make test-fast`, tests/conftest.py) names files and tests that exist: a test
file moved or renamed by a refactor would otherwise leave the tier silently."""

from __future__ import annotations

from conftest import FAST_FILES, NOT_FAST, TESTS


def test_every_file_of_the_tier_exists():
    assert [name for name in FAST_FILES if not (TESTS / name).is_file()] == []


def test_every_test_left_out_is_in_a_file_of_the_tier_and_exists():
    for entry in NOT_FAST:
        name, test = entry.split("::")
        assert name in FAST_FILES, entry
        assert f"def {test.split('[')[0]}" in (TESTS / name).read_text(), entry
