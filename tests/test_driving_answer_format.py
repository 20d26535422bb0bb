"""The answer-format interface: today's formats as its implementations (their stated precision bounds the measured
round-trip error and is tight), and a user's own format passed as an object."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wamdiff.driving import trajectory as tr
from wamdiff.driving.answer_format import BUILTIN, AnswerFormat, answer_format, round_trip_error


def _plans(n=200, seed=0):
    rng = np.random.default_rng(seed)
    t = 0.5 * np.arange(1, 9)[:, None]
    speed = rng.uniform(0, 25, (n, 1, 1))
    lateral = rng.uniform(-0.8, 0.8, (n, 1, 1))
    x = speed * t[None] + rng.normal(0, 0.3, (n, 8, 1))
    y = lateral * t[None] ** 2 + rng.normal(0, 0.3, (n, 8, 1))
    return np.concatenate([x, y], axis=2)


@pytest.mark.parametrize("name", tr.FORMATS)
def test_each_format_states_a_precision_its_round_trips_keep_and_reach(name):
    f = answer_format(name)
    assert isinstance(f, AnswerFormat) and f.name == name and f.waypoints == 8 and f.horizon_s == 4.0
    errors = [round_trip_error(f, xy) for xy in _plans()]
    assert max(errors) <= f.precision_m * (1 + 1e-6)  # never worse than stated
    assert max(errors) > 0.8 * f.precision_m  # and the statement is tight (a grid half-step is reached)


def test_layouts_and_cells_follow_the_formats():
    assert [n for n, f in BUILTIN.items() if f.layout == "text"] == ["text2", "text1"]
    assert [n for n, f in BUILTIN.items() if f.layout == "tokens"] == list(tr.ORDINAL_FORMATS)
    assert BUILTIN["text2"].cells() is None
    answer = BUILTIN["fixed1"].format(_plans(1)[0])
    cells = BUILTIN["fixed1"].cells()
    assert len(cells) == len(answer) and all(ch in cell for ch, cell in zip(answer, cells))


class JsonPairs:
    """A user's VLA answering '[[x, y], ...]' with 6 waypoints at 0.5 s and 1 decimal."""

    name, waypoints, interval_s, precision_m, layout = "json-pairs", 6, 0.5, 0.05, "text"

    def format(self, xy) -> str:
        return json.dumps([[round(float(x), 1), round(float(y), 1)] for x, y in np.asarray(xy)[:, :2]])

    def parse(self, text: str) -> tr.ParsedTrajectory:
        try:
            xy = np.asarray(json.loads(text), float)
        except ValueError:
            return tr.ParsedTrajectory(False, None, "not JSON")
        ok = xy.shape == (self.waypoints, 2)
        return tr.ParsedTrajectory(ok, xy if ok else None, "" if ok else f"shape {xy.shape}")

    def cells(self):
        return None


def test_a_users_own_format_is_an_answer_format():
    f = answer_format(JsonPairs())
    xy = _plans(1)[0][:6]
    assert round_trip_error(f, xy) <= 0.05 + 1e-9
    assert not f.parse("[[1, 2]]").ok


def test_what_is_not_a_format_is_named():
    with pytest.raises(ValueError, match="'text3'"):
        answer_format("text3")
    with pytest.raises(ValueError, match="lacks"):
        answer_format(object())
    bad = JsonPairs()
    bad.layout = "columns"
    with pytest.raises(ValueError, match="columns"):
        answer_format(bad)
