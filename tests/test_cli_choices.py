"""Help that cannot drift: every option with a closed set of values lists, in its `--help`, exactly the values the
code's own registry (and so the validation) accepts; help texts survive rich markup; one name per idea."""

from __future__ import annotations

import re

import pytest
import typer
from rich.text import Text
from typer.testing import CliRunner

from wamdiff.cli import app


def _registries():
    from wamdiff.decoding.bench.grid import DTYPES as GRID_DTYPES
    from wamdiff.decoding.config import ATTENTIONS, DTYPE_NAMES
    from wamdiff.decoding.lean import LEAN_MODES
    from wamdiff.driving.dataset import SPLIT_SEED_BASE
    from wamdiff.driving.trajectory import FIXED_WIDTH_FORMATS, FORMATS
    from wamdiff.driving.world import FAMILIES
    from wamdiff.executors import EXECUTOR_KINDS

    return {"formats": FORMATS, "fixed": FIXED_WIDTH_FORMATS, "modes": ("ar", "block"), "dtypes": tuple(DTYPE_NAMES),
            "grid_dtypes": tuple(GRID_DTYPES), "attention": ATTENTIONS, "lean": LEAN_MODES, "executors": EXECUTOR_KINDS,
            "splits": tuple(SPLIT_SEED_BASE), "routes": ("dev", "full"), "families": FAMILIES, "caches": ("exact", "delayed")}


# (command, option, registry): options with one value out of a closed set
CHOICES = [
    ("data generate", "--format", "formats"), ("data generate", "--split", "splits"),
    ("data generate", "--executor", "executors"), ("data quantization", "--split", "splits"), ("data qa", "--split", "splits"),
    ("data aggregate", "--format", "formats"), ("model grammar", "--format", "fixed"),
    ("eval pdms", "--split", "splits"), ("eval pdms", "--executor", "executors"), ("eval openloop", "--split", "splits"),
    ("eval closedloop", "--routes", "routes"), ("eval closedloop", "--executor", "executors"),
    ("bench", "--format", "formats"), ("bench", "--attention", "attention"), ("bench", "--lean", "lean"),
    ("serve", "--mode", "modes"), ("serve", "--dtype", "dtypes"), ("serve", "--format", "formats"),
    ("serve-bench", "--format", "formats"),
]
# (command, option, registry): options taking a comma-separated list of such values
LISTS = [
    ("data generate", "--families", "families"), ("eval pdms", "--families", "families"),
    ("eval openloop", "--families", "families"), ("eval closedloop", "--families", "families"),
    ("bench", "--dtypes", "grid_dtypes"), ("bench", "--caches", "caches"),
]


def _help(monkeypatch, command: str) -> str:
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)  # one line per option: nothing wraps
    res = CliRunner().invoke(app, [*command.split(), "--help"])
    assert res.exit_code == 0, res.output
    return res.output


def _option_line(text: str, option: str) -> str:
    lines = [ln for ln in text.splitlines() if option in ln.strip("│ *").split(" ")[0].split(",")]  # its names column
    assert len(lines) == 1, (option, lines)
    return lines[0]


@pytest.mark.parametrize(("command", "option", "registry"), CHOICES, ids=[f"{c}{o}" for c, o, _ in CHOICES])
def test_help_lists_exactly_the_registry(monkeypatch, command, option, registry):
    values = _registries()[registry]
    line = _option_line(_help(monkeypatch, command), option)
    listed = re.search(r"<([^<>]+)>", line).group(1).split("|")
    assert listed == list(values)
    res = CliRunner().invoke(app, [*command.split(), option, "no-such-value"])
    assert res.exit_code == 2 and option in res.output  # validation refuses what the help does not list


@pytest.mark.parametrize(("command", "option", "registry"), LISTS, ids=[f"{c}{o}" for c, o, _ in LISTS])
def test_list_help_names_exactly_the_registry(monkeypatch, command, option, registry):
    from wamdiff.cli_choices import parse_list

    values = _registries()[registry]
    line = _option_line(_help(monkeypatch, command), option)
    listed = re.search(r"one or more of (.+?), comma separated", line).group(1).split(", ")
    assert listed == list(values)
    assert parse_list(",".join(values), values, option) == list(values)
    with pytest.raises(typer.BadParameter) as refused:
        parse_list("no-such-value", values, option)
    assert option in refused.value.format_message() and "no-such-value" in refused.value.format_message()


def _params():
    """(command path, click parameter) for every option of every command."""
    root = typer.main.get_command(app)
    stack = [("wamdiff", root)]
    while stack:
        path, cmd = stack.pop()
        for p in cmd.params:
            yield path, p
        for name, sub in getattr(cmd, "commands", {}).items():
            stack.append((f"{path} {name}", sub))


def test_help_texts_survive_rich_markup():
    """Help goes through rich markup: text in brackets that reads as a style tag ("[ray]") would vanish."""
    checked = 0
    for path, p in _params():
        text = getattr(p, "help", None) or ""
        checked += "[" in text
        assert Text.from_markup(text).plain == text.replace("\\[", "["), f"{path} {p.opts}: {text!r}"
    assert checked  # the executor help has a bracket: the check ran on one


def test_one_name_per_idea_old_spellings_still_parse():
    old_to_new = {"--fmt": "--format", "--family": "--families", "--block": "--block-size"}
    seen = set()
    for path, p in _params():
        opts = list(getattr(p, "opts", []))
        assert not opts or opts[0] not in old_to_new, f"{path}: {opts[0]} is an old spelling, not the canonical name"
        for old, new in old_to_new.items():
            if old in opts:
                assert opts[0] == new, (path, opts)
                seen.add(old)
    assert seen == set(old_to_new)  # every old spelling is still accepted somewhere


def test_every_option_has_help():
    missing = [f"{path} {p.opts}" for path, p in _params()
               if getattr(p, "param_type_name", "") == "option" and not (getattr(p, "help", None) or "").strip()]
    assert not missing, missing


def test_the_pipeline_stages_example_names_stages_of_the_default_config(monkeypatch):
    import yaml

    line = _option_line(_help(monkeypatch, "pipeline"), "--stages")
    example = re.search(r"e\.g\. ([\w,]+)", line).group(1).split(",")
    stages = {s["name"] for s in yaml.safe_load(open("configs/default.yaml"))["train"]}
    assert example and set(example) <= stages, (example, sorted(stages))


def test_quantization_help_names_every_format(monkeypatch):
    from wamdiff.driving.trajectory import FORMATS

    text = " ".join(_help(monkeypatch, "data quantization").split())
    assert "every answer format over the dataset's expert futures: " + ", ".join(FORMATS) + "." in text
