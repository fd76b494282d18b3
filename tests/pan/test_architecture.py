"""The layering of docs/architecture.md holds: no import cycle, imports only go down, types come from entry points."""

from __future__ import annotations

import ast
import re
from importlib.metadata import entry_points
from pathlib import Path

from pan.catalog import ENTRY_POINT_GROUP, component_types
from tests.conftest import ROOT

#: The layers, bottom up; the scenario's two live in the one package ``pan_debs``.
LAYERS = ("pan", "pan_debs.simulator", "pan_debs.workers", "benchmarks")
#: Which layer may import which (``pan/cli.py`` loads command modules by name, not by import).
ALLOWED = {"pan": {"pan"}, "pan_debs.simulator": {"pan", "pan_debs.simulator"},
           "pan_debs.workers": {"pan", "pan_debs.simulator", "pan_debs.workers"}, "benchmarks": set(LAYERS)}


def layer(module: str) -> str:
    """The layer a module belongs to: its package, or for ``pan_debs`` its subpackage."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pan_debs" else parts[0]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module imported anywhere in the file (inside functions too), except under TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for guard in ast.walk(tree) if isinstance(guard, ast.If)
                   and "TYPE_CHECKING" in ast.dump(guard.test) for node in ast.walk(guard)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in LAYERS for p in (ROOT / pkg.replace(".", "/")).rglob("*.py")}
    return {name: {m for m in imports(path) if m in files and m != name} for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the walk found the packages
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_only_go_down_the_layers() -> None:
    upward = [(name, dep) for name, deps in import_graph().items() for dep in deps
              if layer(dep) not in ALLOWED[layer(name)]]
    assert upward == []


def test_every_component_type_comes_through_the_entry_point_group() -> None:
    modules = {entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}
    assert {"pan.builtin_components", "pan.ordered", "pan_debs.workers.components"} <= modules
    types = component_types()
    assert {"forwarder", "repeater", "merge", "active_ball", "heatmap", "shots"} <= types.keys()
    assert all(layer(cls.__module__) in ("pan", "pan_debs.workers", "tests") or cls.__module__ == "readme_example"
               for cls in types.values())


def test_the_cli_names_no_scenario_module() -> None:
    source = (ROOT / "pan" / "cli.py").read_text()
    assert not [pkg for pkg in ("pan_debs", "workers", "simulator", "benchmarks")
                if re.search(rf"\b{pkg}\.\w", source)]
    assert not {name.split(".")[0] for name in imports(ROOT / "pan" / "cli.py")} - {"pan", "argparse", "logging",
                                                                                    "sys", "importlib", "__future__"}
    commands = {entry.value for entry in entry_points(group="pan.commands")}
    assert {"pan.commands.runtime", "pan_debs.workers.demo_cli", "pan_debs.simulator.simulate_cli",
            "benchmarks.cli"} <= commands


#: Words of the soccer scenario that the generic core must not contain, in code, names, comments or docstrings:
#: what wears the sources and what the scenario names its streams and CSV fields (``pan_debs/simulator/debs_rows.py``).
#: Only words that cannot be ordinary English or generic code ("a", "v", "x" can).
SCENARIO_WORDS = re.compile(
    r"(?<![A-Za-z0-9])(?:sensors?|players?|balls?|debs|sensor\d+|sid|vx|vy|vz|ax|ay|az|goal(?:keeper)?s?|referees?)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def scenario_words(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: word`` for every scenario word in ``path`` (an underscore separates words too)."""
    return [f"{path.relative_to(root)}:{number}: {match.group(0)}"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            for match in SCENARIO_WORDS.finditer(line)]


def test_the_core_names_no_scenario_word() -> None:
    modules = sorted((ROOT / "pan").rglob("*.py"))
    assert len(modules) > 20  # the walk found the core
    assert [hit for path in modules for hit in scenario_words(path)] == []


def test_the_scenario_word_scan_finds_them(tmp_path: Path) -> None:
    module = tmp_path / "pan" / "example.py"
    module.parent.mkdir()
    module.write_text('"""Reads a Sensor."""\nSTREAM = "SENSOR105"  # the ball\nfields = ("sid", "vx")\n'
                      "PLAYER_SPEED = 1\nsensibly, balloon, sidebar, maxima, taxes = 0, 0, 0, 0, 0  # no match\n")
    hits = scenario_words(module, tmp_path)
    name = module.relative_to(tmp_path).as_posix()
    assert hits == [f"{name}:1: Sensor", f"{name}:2: SENSOR105", f"{name}:2: ball",
                    f"{name}:3: sid", f"{name}:3: vx", f"{name}:4: PLAYER"]
