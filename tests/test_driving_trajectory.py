"""Answer formats: round trips within resolution, fixed widths, tolerant parsing (fuzzed), quantisation floors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff.driving.trajectory import (
    BIN_RANGE_X, BIN_RANGE_Y, BINS, FORMATS, format_trajectory, headings_from_xy, parse_trajectory, quantization_error,
)

RESOLUTION = {"text2": 0.005, "fixed2": 0.005, "text1": 0.05, "fixed1": 0.05, "delta": 0.05}


def _random_trajectories(n, seed=0):
    rng = np.random.default_rng(seed)
    speed = rng.uniform(0, 28, n)[:, None]
    t = np.arange(1, 9) * 0.5
    x = speed * t + rng.normal(0, 0.5, (n, 8)).cumsum(1)
    y = rng.normal(0, 1.5, (n, 1)) * t ** 2 / 4 + rng.normal(0, 0.2, (n, 8))
    return np.stack([np.clip(x, -4.9, 119), np.clip(y, -29, 29)], -1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_within_resolution(fmt):
    for xy in _random_trajectories(50):
        parsed = parse_trajectory(format_trajectory(xy, fmt), fmt)
        assert parsed.ok, parsed.reason
        err = np.abs(parsed.xy - xy)
        if fmt == "bins":
            half = np.array([(BIN_RANGE_X[1] - BIN_RANGE_X[0]) / BINS / 2, (BIN_RANGE_Y[1] - BIN_RANGE_Y[0]) / BINS / 2])
            assert np.all(err <= half + 1e-9)
        else:
            assert np.all(err <= RESOLUTION[fmt] + 1e-9)


def test_exact_strings():
    xy = np.array([[1.234, -0.5], [12.0, 0.004]] + [[0.0, 0.0]] * 6)
    assert format_trajectory(xy, "text2").startswith("1.23,-0.50,12.00,0.00,")
    assert format_trajectory(xy, "fixed1").startswith("+001.2,-000.5,+012.0,+000.0,")
    assert format_trajectory(xy, "fixed2").startswith("+001.23,-000.50,+012.00,+000.00,")
    assert format_trajectory(xy, "bins").startswith("<|bin_12|><|bin_125|>")  # floor((1.234+5)/125*256)=12


@pytest.mark.parametrize("fmt,width", [("fixed1", 6), ("fixed2", 7)])
def test_fixed_width_positions_never_shift(fmt, width):
    lengths = set()
    for xy in _random_trajectories(30, seed=1):
        text = format_trajectory(xy, fmt)
        assert all(len(f) == width for f in text.split(","))
        lengths.add(len(text))
    assert lengths == {16 * width + 15}


@pytest.mark.parametrize("text,fmt,why", [
    ("1.00,2.00,3.00", "text2", "expected 16"),
    ("", "text2", "empty"),
    (",".join(["1.0"] * 15) + ",abc", "text1", "unexpected character"),
    (",".join(["1000.00"] * 16), "text2", "out of bounds"),
    (",".join(["+1.0"] * 16), "fixed1", "fixed width"),
    ("<|bin_3|>" * 15, "bins", "expected 16"),
    ("<|bin_300|>" * 16, "bins", "out of range"),
    ("<|dx_3|><|dy_4|>" * 7, "delta", "expected 16"),
    ("<|dy_4|><|dx_3|>" * 8, "delta", "out of order"),
    ("<|dx_3|><|dy_400|>" * 8, "delta", "out of range"),
    ("<|dx_3|>,<|dy_4|>" * 8, "delta", "unexpected text"),
    (",".join(["1.0"] * 15) + ",", "text1", "malformed"),
])
def test_parse_rejects_with_reason(text, fmt, why):
    parsed = parse_trajectory(text, fmt)
    assert not parsed.ok and parsed.xy is None
    assert why in parsed.reason


def test_parse_tolerates_end_token_and_brackets():
    xy = _random_trajectories(1)[0]
    text = "[" + format_trajectory(xy, "text2") + "]<|im_end|>\n"
    assert parse_trajectory(text, "text2").ok


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789.,-+ <|>bin_[]e\nx")), max_size=200), st.sampled_from(FORMATS))
def test_parser_never_raises_on_fuzz(text, fmt):
    parsed = parse_trajectory(text, fmt)
    if parsed.ok:
        assert parsed.xy.shape == (8, 2) and np.all(np.isfinite(parsed.xy)) and np.all(np.abs(parsed.xy) <= 250)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=100))
def test_parser_never_raises_on_any_text(text):
    for fmt in FORMATS:
        parse_trajectory(text, fmt)
    parse_trajectory(None, "text2")


def test_headings_from_xy():
    straight = np.stack([np.arange(1, 9) * 2.0, np.zeros(8)], -1)
    assert np.allclose(headings_from_xy(straight), 0)
    up = np.stack([np.zeros(8), np.arange(1, 9) * 1.0], -1)
    assert np.allclose(headings_from_xy(up), np.pi / 2)
    stopped = np.zeros((8, 2))
    assert np.allclose(headings_from_xy(stopped), 0)  # standing still keeps the t0 heading


def test_quantisation_floors_match_design():
    trajs = _random_trajectories(400, seed=3)
    err = {fmt: np.mean([quantization_error(xy, fmt) for xy in trajs]) for fmt in ("text2", "text1", "bins")}
    assert err["text2"] == pytest.approx(0.0038, abs=0.001)
    assert err["text1"] == pytest.approx(0.038, abs=0.006)
    assert err["bins"] == pytest.approx(0.143, abs=0.03)


def test_delta_codes_the_displacements_with_error_feedback():
    """Brute force: each token is the rounded step from the previously DECODED point, so errors never add up."""
    from wamdiff.models import tokens as T

    xy = np.cumsum(np.tile([[1.04, 0.03]], (8, 1)), axis=0)  # 0.04 / 0.03 m off the grid every step
    text = format_trajectory(xy, "delta")
    prev, want = np.zeros(2), []
    for p in xy:
        i = int(round((p[0] - prev[0] - T.DELTA_X_RANGE[0]) / T.DELTA_STEP))
        j = int(round((p[1] - prev[1] - T.DELTA_Y_RANGE[0]) / T.DELTA_STEP))
        want.append(T.DELTA_X_TOKENS[i] + T.DELTA_Y_TOKENS[j])
        prev = prev + [T.DELTA_X_RANGE[0] + i * T.DELTA_STEP, T.DELTA_Y_RANGE[0] + j * T.DELTA_STEP]
    assert text == "".join(want)
    decoded = parse_trajectory(text, "delta").xy
    assert np.abs(decoded - xy).max() <= 0.05 + 1e-9  # naive per-step rounding would drift by 8 x 0.04 m


@pytest.mark.parametrize("fmt", ["fixed1", "fixed2", "bins", "delta"])
def test_format_cells_spell_every_formatter_output(fmt):
    """Each formatted answer is exactly one alternative per cell, in order (what the grammar varies)."""
    from wamdiff.driving.trajectory import format_cells

    cells = format_cells(fmt)
    rng = np.random.default_rng(3)
    for _ in range(100):
        text = format_trajectory(np.stack([rng.uniform(-999, 999, 8), rng.uniform(-999, 999, 8)], 1), fmt)
        for cell in cells:
            hit = [a for a in cell if text.startswith(a)]
            assert len(hit) == 1, (fmt, text[:20], cell[:3])
            text = text[len(hit[0]):]
        assert text == ""
    with pytest.raises(ValueError, match="no fixed width"):
        format_cells("text2")
