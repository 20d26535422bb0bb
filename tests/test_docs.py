"""The manual cannot drift from the code: every `wamdiff` command it shows parses with the real CLI (the named
sub-command, its options and their values), every repository path it names exists, the README stays short and its
results table equals the result file it comes from."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md"))]
SOURCES = [ROOT / "Makefile", *sorted((ROOT / "src").rglob("*.py"))]  # docstrings and comments name files too
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def commands(path: Path) -> list[str]:
    """The `wamdiff ...` command lines of a page's bash blocks (`make` lines and comments left out)."""
    out = []
    for block in FENCE.findall(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("wamdiff "):
                out.append(line)
    return out


EXAMPLES = [(p.relative_to(ROOT).as_posix(), c) for p in GUIDES for c in commands(p)]


def parse(argv: list[str]):
    """Resolve `wamdiff ARGV` to its command and parse every option and value as the CLI would, running nothing."""
    from wamdiff.cli import app

    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("wamdiff", list(argv))
    while hasattr(cmd, "commands"):
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
        if not rest:
            break
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return cmd, ctx.params


def test_the_guides_show_commands():
    pages = {page for page, _ in EXAMPLES}
    assert {"README.md", "docs/guides/convert.md", "docs/guides/evaluate.md", "docs/guides/train.md"} <= pages
    assert len(EXAMPLES) >= 25


@pytest.mark.parametrize(("page", "line"), EXAMPLES, ids=[f"{p}:{c[:60]}" for p, c in EXAMPLES])
def test_every_command_example_parses(page, line):
    from wamdiff.cli_choices import FAMILIES, parse_list

    argv = shlex.split(line)[1:]
    cmd, params = parse(argv)  # an unknown command or option, a bad choice, a missing required option: raises
    assert cmd.callback is not None, f"{page}: `{line}` names a group, not a command"
    if params.get("families"):
        parse_list(params["families"], FAMILIES, "--families")
    for option in ("config", "recipe"):
        if isinstance(params.get(option), str):
            assert (ROOT / params[option]).is_file(), f"{page}: `{line}`: {params[option]} does not exist"


def test_a_wrong_example_would_fail():
    from typer._click.exceptions import UsageError

    for bad in (["data", "generate", "--out", "x", "--format", "delta2"], ["eval", "closedloop", "--no-such-option"],
                ["model", "no-such-command"]):
        with pytest.raises(UsageError):
            parse(bad)


PATH = re.compile(r"(?<![\w./-])((?:configs|docs|src|tests|tools|checkpoints)/\S*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def named_paths(page: Path) -> set[str]:
    text = page.read_text()
    words = (re.split(r"[,;:$\]()\"'`#]", m)[0].rstrip(".") for m in PATH.findall(text))  # cut at spec options, links
    return {w for w in words if not re.search(r"[<>{}*|\[]|\.\.\.", w)}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_repository_path_named_exists(page):
    missing = sorted(p for p in named_paths(page) if not (ROOT / p).exists())
    # earlier releases, the dated results notes and measured results name the checkpoints shipped then, some retired
    if page in (ROOT / "docs" / "HISTORY.md", ROOT / "docs" / "development" / "results-notes.md") or \
            (ROOT / "docs" / "results") in page.parents:
        missing = [p for p in missing if not p.startswith("checkpoints/")]
    links = [m for m in LINK.findall(page.read_text()) if "://" not in m and not m.startswith("mailto:")]
    missing += sorted(m for m in links if not (page.parent / m).exists() and not _generated(page, m))
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("source", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES])
def test_every_repository_path_a_source_names_exists(source):
    missing = sorted(p for p in named_paths(source) if not (ROOT / p).exists())
    assert not missing, f"{source.relative_to(ROOT)} names paths that do not exist: {missing}"


def _generated(page: Path, link: str) -> bool:
    """A docs page made at build time (tools/mkdocs_hooks.py) is linked to but not in the tree."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    target = (page.parent / link).resolve()
    return any(target == (ROOT / "docs" / p).resolve() for p in mkdocs_hooks.GENERATED)


def test_the_path_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("see configs/no_such.yaml, `tests/test_<area>_*.py` and [x](no_such.md)")
    assert named_paths(page) == {"configs/no_such.yaml"}
    assert not (ROOT / "configs/no_such.yaml").exists()


def test_readme_is_short():
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 1500, f"README.md has {words} words; the manual (docs/) holds the rest"


def test_readme_results_table_is_the_result_file():
    sys.path.insert(0, str(ROOT / "tools"))
    import mkdocs_hooks

    text = (ROOT / "README.md").read_text()
    table = re.search(r"<!-- pipeline-table:[^\n]*-->\n(.*?)\n<!-- /pipeline-table -->", text, re.S)
    assert table, "README.md lost its generated results table markers"
    assert table.group(1) == mkdocs_hooks.pipeline_table(), ("README's table differs from docs/results/pipeline/"
                                                             "summary.csv: paste tools/mkdocs_hooks.pipeline_table()")


def test_no_document_outside_the_repository_is_cited():
    """The repository stands alone: no citation of a design brief or a sibling folder that is not in it."""
    pattern = re.compile(r"\bDESIGN\b|\.\./shared/")
    hits = []
    for path in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "src").rglob("*.py"),
                 *(ROOT / "tests").glob("*.py"), *(ROOT / "configs").rglob("*.yaml")]:
        if path.name == "test_docs.py":
            continue
        hits += [f"{path.relative_to(ROOT)}:{i}" for i, ln in enumerate(path.read_text().splitlines(), 1) if pattern.search(ln)]
    assert not hits, hits
