"""The package's import graph: every module imports, no two modules import each other (directly or round a loop),
and no area imports an area above it. The graph is read from the source with `ast` (function-level imports and
the lazy package exports included), so a new cycle fails here before it fails at run time."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path


SRC = Path(__file__).resolve().parents[1] / "src" / "wamdiff"

# Lowest first; an area may import its own layer's modules and any layer below, never one above.
LAYERS = [
    {"wamdiff", "_lazy", "jsonfile", "atomic", "provenance", "comfort_bounds", "errors", "outdir", "executors", "names",
     "cli_choices", "resources", "yamlconfig"},
    {"diffusion"},
    {"models"},
    {"decoding"},  # the decode engine: reads answers through `decoding.answer.AnswerFormat`, knows no driving
    {"driving"},  # the driving world and today's answer formats (`driving.answer_format` implements the interface)
    {"eval", "training"},
    {"serve"},
    {"orchestration"},
    {"cli"},
]


def modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def lazy_exports(tree: ast.Module, package: str) -> dict[str, str]:
    """name -> defining module, from a package's `lazy_exports(__name__, {module: [names]})` call."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_exports" and len(node.args) == 2:
            table = ast.literal_eval(node.args[1])
            out.update({name: f"{package}.{mod}" for mod, names in table.items() for name in names})
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    trees = {m: ast.parse(p.read_text()) for m, p in mods.items()}
    lazy = {m: lazy_exports(t, m) for m, t in trees.items() if mods[m].name == "__init__.py"}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, tree in trees.items():
        package = m if mods[m].name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base]
                for a in node.names:
                    targets.append(f"{base}.{a.name}")  # a sub-module imported by name
                    targets.append(lazy.get(base, {}).get(a.name, ""))  # a lazily exported name
            else:
                continue
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer(module: str) -> int:
    (i,) = [i for i, names in enumerate(LAYERS) if area(module) in names]
    return i


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (c := visit(n)):
                return c
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_every_area_has_a_layer():
    assert {area(m) for m in modules()} <= set().union(*LAYERS)


def test_no_import_cycles():
    assert find_cycle(import_graph()) is None


def test_no_area_imports_an_area_above_it():
    upward = [(a, b) for a, targets in import_graph().items() for b in targets if layer(b) > layer(a)]
    assert upward == []


def test_the_decode_engine_does_not_import_driving():
    """`wamdiff.decoding` reads answers through its own interface (`decoding.answer.AnswerFormat`) and gets its
    prompts, formats and parsers from its callers: no module under it imports `wamdiff.driving`, not even lazily."""
    graph = import_graph()
    offending = sorted(f"{m} -> {t}" for m, targets in graph.items() if area(m) == "decoding"
                       for t in targets if area(t) == "driving")
    assert offending == []


def test_the_checks_can_fail():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer("wamdiff.orchestration.pipeline") > layer("wamdiff.serve.app") > layer("wamdiff.eval.run") > \
        layer("wamdiff.models.build")


def import_every_module(package: str = "wamdiff") -> tuple[list[str], list[str]]:
    """Import `package` and every module under it (pkgutil's walk); returns (modules found, "name: error" lines)."""
    failed: list[str] = []
    root = importlib.import_module(package)
    found = [package]
    for info in pkgutil.walk_packages(root.__path__, f"{package}.", onerror=lambda name: failed.append(f"{name}: walk failed")):
        found.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as err:  # noqa: BLE001 - every failing module is reported, not just the first
            failed.append(f"{info.name}: {type(err).__name__}: {err}".splitlines()[0])
    return found, failed


def test_every_module_imports():
    """One import of every module (not a test per module): the message lists every module that fails."""
    found, failed = import_every_module()
    assert not failed, f"{len(failed)} module(s) fail to import:\n" + "\n".join(failed)
    assert sorted(found) == sorted(modules())  # the walk saw every file (a folder without __init__.py would hide its modules)


def test_the_import_check_reports_every_failing_module(tmp_path, monkeypatch):
    pkg = tmp_path / "brokenpkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "fine.py").write_text("X = 1\n")
    (pkg / "bad.py").write_text("import no_such_module_anywhere\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "worse.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found, failed = import_every_module("brokenpkg")
    assert sorted(found) == ["brokenpkg", "brokenpkg.bad", "brokenpkg.fine", "brokenpkg.sub", "brokenpkg.sub.worse"]
    assert failed == ["brokenpkg.bad: ModuleNotFoundError: No module named 'no_such_module_anywhere'",
                      "brokenpkg.sub.worse: ZeroDivisionError: division by zero"]
