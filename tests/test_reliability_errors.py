"""The one error policy, through the real `wamdiff` CLI: a user error is one line on stderr naming the file /
option / record and what to do, exit code 2, no traceback (that needs --debug or WAMDIFF_DEBUG=1).

Also the helpers the other test_reliability_* files use to run the CLI in-process (typer's CliRunner on the
root app, which goes through the same policy as the installed `wamdiff` entry point).
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from wamdiff.cli import app


def cli(*args, env: dict | None = None):
    """Run `wamdiff ARGS` in-process; returns click's Result (exit_code, stdout, stderr, exception)."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def assert_user_error(result, *needles: str) -> str:
    """Exit 2, stderr is exactly one `error: ...` line containing every needle, no traceback; returns the line."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


def no_progress_lines(result) -> list[str]:
    """stderr lines other than tqdm progress bars (which redraw on stderr)."""
    return [ln for ln in result.stderr.replace("\r", "\n").splitlines() if ln.strip() and "scene" not in ln]


# ------------------------------------------------------------------------------------------------ files


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny"
    res = cli("model", "build", "--preset", "tiny", "--out", out)
    assert res.exit_code == 0, res.stderr
    return out


def test_truncated_safetensors_is_named(tiny_model, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    weights = broken / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    line = assert_user_error(cli("model", "info", broken), str(weights), "truncated or corrupt")
    assert "SafetensorError" not in line.split(":")[0]
    # the same file through another command that loads a model
    assert_user_error(cli("model", "convert", broken, "--block-size", "4", "--out", tmp_path / "conv"), str(weights))


def test_debug_flag_and_env_show_the_traceback(tiny_model, tmp_path):
    missing = tmp_path / "nothing-here"
    plain = cli("model", "info", missing)
    assert_user_error(plain, str(missing))
    for res in (cli("model", "info", missing, "--debug"), cli("--debug", "model", "info", missing),
                cli("model", "info", missing, env={"WAMDIFF_DEBUG": "1"})):
        assert res.exit_code != 2 and isinstance(res.exception, ValueError)  # raised, so the traceback is printed


def test_missing_training_image_names_the_json_file_and_record(tmp_path):
    import yaml
    from test_training_fixtures import make_data, tiny_recipe

    data = make_data(tmp_path / "data", n_train=4)
    rows = json.loads(data["train"].read_text())
    victim = Path(data["train"].parent / rows[2]["image"][0])
    victim.unlink()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(data, tmp_path / "run", "block", optim={"steps": 1})))
    line = assert_user_error(cli("train", "--recipe", recipe), str(data["train"]), f"'{rows[2]['id']}'", "(item 2)", "image")
    assert str(victim) in line


def test_bad_recipe_is_one_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("kind: [block\n")
    assert_user_error(cli("train", "--recipe", recipe), str(recipe))
    assert_user_error(cli("train", "--recipe", tmp_path / "absent.yaml"), "absent.yaml")


def test_truncated_scene_is_reported_and_skipped_by_eval(tmp_path):
    from wamdiff.driving.scene import Scene
    from wamdiff.eval.synthetic import random_scenes

    data = tmp_path / "scenes"
    good, bad = random_scenes(2)
    good.save(data / "good")
    bad_path = bad.save(data / "bad")
    with open(bad_path, "r+b") as f:
        f.truncate(bad_path.stat().st_size // 3)
    with pytest.raises(ValueError, match="bad.npz"):
        Scene.load(bad_path)
    out = tmp_path / "res"
    res = cli("eval", "pdms", "-p", "cv", "--data", data, "--out", out, "--plots", "0")
    assert res.exit_code == 0, res.stderr
    assert "1 unreadable scene file(s)" in res.stdout and "bad.npz" in res.stdout.replace("\n", "")
    agg = json.loads((out / "pdms_cv.json").read_text())
    assert agg["overall"]["n"] == 1 and [Path(u["file"]).name for u in agg["unreadable_files"]] == ["bad.npz"]
    assert agg["n_unreadable"] == 1
    for summary in ("pdms_summary.json", "openloop_summary.json"):  # counted in every summary, not only per planner
        got = json.loads((out / summary).read_text())
        assert (got["n_scenes"], got["n_unreadable"]) == (1, 1) and Path(got["unreadable_files"][0]["file"]).name == "bad.npz"
    assert json.loads((out / "open_summary.json").read_text())["cv"]["n_unreadable"] == 1
    assert "1 scenes, 1 unreadable scene file(s) skipped" in " ".join(res.stdout.split())  # and in the table's title


def _impossible_out(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return blocker / "out"  # cannot be created, whoever runs the test (root ignores permission bits)


def test_unwritable_out_fails_before_any_work(tmp_path):
    from wamdiff.eval.synthetic import random_scenes

    data = tmp_path / "scenes"
    for i, s in enumerate(random_scenes(2)):
        s.save(data / f"s{i}")
    out = _impossible_out(tmp_path)
    for args in (["eval", "pdms", "-p", "cv", "--data", data], ["eval", "openloop", "-p", "cv", "--data", data],
                 ["eval", "closedloop", "-p", "cv"], ["data", "generate", "--family", "highway", "--n", "1"],
                 ["bench", "--preset", "tiny", "--quick"]):
        res = cli(*args, "--out", out)
        assert_user_error(res, str(out), "cannot be written")
        assert res.stdout.strip() == ""  # nothing was planned, simulated or loaded first


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_fails_before_any_work(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert_user_error(cli("data", "generate", "--family", "highway", "--n", "1", "--out", out), str(out), "cannot be written")
    finally:
        out.chmod(0o755)


def test_n_prompts_minus_one_is_rejected_not_a_dropped_prompt(tmp_path):
    for v in ("-1", "-5", "0"):
        res = cli("bench", "--preset", "tiny", "--n-prompts", v, "--out", tmp_path / "b")
        assert_user_error(res, "'--n-prompts'")
    assert not (tmp_path / "b").exists()


# ------------------------------------------------------------------------------------------------ property


def _invalid_int_values(minimum: int):
    """Text that is not an integer >= minimum (typer parses ints leniently: '1.0', ' 3', '1_000' are valid)."""
    below = st.integers(max_value=minimum - 1).map(str)
    words = st.text(alphabet=string.ascii_letters + "äßøπ", min_size=1, max_size=6)
    fractions = (st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False, min_value=-1e6, max_value=1e6)
                 .filter(lambda x: x != int(x)).map(repr))
    return st.one_of(below, words, fractions, st.sampled_from(["", "nan", "inf", "1e3", "0x10"]))


# (command line before the option, option, minimum). A guard after the option makes a wrongly accepted value
# fail fast (unknown family, missing data, missing checkpoint) with a message that does not name the option.
_CASES = [
    (["data", "generate", "--family", "no-such-family", "--out", "{out}"], "--n", 1),
    (["data", "generate", "--family", "no-such-family", "--out", "{out}"], "--workers", 1),
    (["data", "generate", "--family", "no-such-family", "--out", "{out}"], "--image-size", 8),
    (["eval", "pdms", "-p", "cv", "--data", "{missing}", "--out", "{out}"], "--limit", 1),
    (["eval", "pdms", "-p", "cv", "--data", "{missing}", "--out", "{out}"], "--batch", 1),
    (["eval", "openloop", "-p", "cv", "--data", "{missing}", "--out", "{out}"], "--limit", 1),
    (["eval", "closedloop", "-p", "cv", "--families", "no-such-family", "--out", "{out}"], "--strips", 0),
    (["eval", "closedloop", "-p", "cv", "--families", "no-such-family", "--out", "{out}"], "--per-family", 1),
    (["eval", "bench", "--data", "{missing}"], "--n", 1),
    (["bench", "--checkpoint", "{missing}", "--out", "{out}"], "--n-prompts", 1),
    (["bench", "--checkpoint", "{missing}", "--out", "{out}"], "--repeats", 1),
    (["bench", "--checkpoint", "{missing}", "--out", "{out}"], "--max-new-tokens", 1),
    (["model", "convert", "{missing}", "--out", "{out}"], "--block-size", 1),
]


@pytest.mark.parametrize(("prefix", "option", "minimum"), _CASES, ids=[f"{c[0][0]}-{c[0][1]}{c[1]}" for c in _CASES])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_invalid_option_value_is_one_line_and_exit_2(tmp_path, prefix, option, minimum, data):
    value = data.draw(_invalid_int_values(minimum), label="value")
    out, missing = tmp_path / "out-never-made", tmp_path / "missing"
    args = [a.format(out=out, missing=missing) for a in prefix] + [option, value]
    res = cli(*args)
    assert_user_error(res, f"'{option}'")
    assert res.stdout == ""
    assert not out.exists()  # rejected before anything was created
