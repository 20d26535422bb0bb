"""The property tests are repeatable: tests/conftest.py loads a derandomised Hypothesis profile, so two runs draw the
same examples (HYPOTHESIS_PROFILE=explore searches with fresh random ones)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

DRAWN: list[list[int]] = []


@settings(max_examples=25)  # decorated at import, like every property test of the suite
@given(st.lists(st.integers(), max_size=8))
def _draw(xs):
    DRAWN[-1].append(hash(tuple(xs)))


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE", "repeatable") != "repeatable", reason="a random profile was asked for")
def test_two_runs_draw_the_same_examples():
    for _ in range(2):
        DRAWN.append([])
        _draw()
    assert settings().derandomize and settings().database is None
    assert DRAWN[0] == DRAWN[1] and len(set(DRAWN[0])) > 5  # the same examples, and not one example again and again
