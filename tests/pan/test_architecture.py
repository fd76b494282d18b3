"""The layering of docs/architecture.md holds: no import cycle, imports only go down, types come from entry points."""

from __future__ import annotations

import ast
import re
from importlib.metadata import entry_points
from pathlib import Path

from pan.components.catalog import ENTRY_POINT_GROUP, component_types
from tests.conftest import ROOT

#: The layers, bottom up: the generic core, the scenario's input and queries, the benchmarks.
LAYERS = ("pan", "simulator", "workers", "benchmarks")
#: Which layer may import which (``pan/cli.py`` loads command modules by name, not by import).
ALLOWED = {"pan": {"pan"}, "simulator": {"pan", "simulator"}, "workers": {"pan", "simulator", "workers"},
           "benchmarks": set(LAYERS)}

#: The subpackages of ``pan/``, bottom up (docs/architecture.md), with the ones each may import. A subpackage
#: imports only ones below it; the list says which, so that a new arrow, upward or not, is a decision.
SUBPACKAGES: dict[str, set[str]] = {
    "util": set(),
    "security": set(),
    "state": set(),
    "http": {"util", "security"},
    "wire": {"http"},
    "ordering": {"wire"},
    "buffers": {"wire"},
    "repository": {"util", "security", "http"},
    "input": {"util", "security", "http", "wire", "buffers", "repository"},
    "ingest": {"util", "wire", "ordering", "buffers"},
    "config": {"security", "buffers"},
    "components": {"util", "wire", "ordering", "buffers", "input", "ingest", "config", "state"},
    "workflow": {"security", "http", "buffers", "repository", "ingest", "config", "components"},
    "worker": {"util", "security", "http", "wire", "buffers", "repository", "input", "config", "components",
               "ordering", "state"},
    "launch": {"security", "config"},
    "deploy": {"security", "config", "workflow"},
    "live": {"util", "security", "http", "repository", "input"},
    "offline": {"util"},
    "commands": {"util", "security", "http", "wire", "repository", "input", "config", "workflow", "worker",
                 "launch", "deploy", "offline"},
}
#: Modules at the top of ``pan/``: the CLI, and the paths promised to users, which re-export from the subpackages.
TOP_LEVEL = {"pan", "pan.__main__", "pan.cli", "pan.catalog", "pan.client", "pan.component", "pan.ordered",
             "pan.specs", "pan.streams", "pan.testing"}


def layer(module: str) -> str:
    """The layer a module belongs to: its top-level package."""
    return module.split(".")[0]


def subpackage(module: str) -> str | None:
    """The subpackage of ``pan/`` a module belongs to; None for a top-level module and outside ``pan/``."""
    parts = module.split(".")
    return parts[1] if parts[0] == "pan" and len(parts) > 1 and parts[1] in SUBPACKAGES else None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module imported anywhere in the file: inside functions and under TYPE_CHECKING too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
    assert {"pan.components.builtin", "pan.components.ordered", "workers.components"} <= modules
    types = component_types()
    assert {"forwarder", "repeater", "merge", "active_ball", "heatmap", "shots"} <= types.keys()
    assert all(layer(cls.__module__) in ("pan", "workers", "tests") or cls.__module__ == "readme_example"
               for cls in types.values())


def test_the_cli_names_no_scenario_module() -> None:
    source = (ROOT / "pan" / "cli.py").read_text()
    assert not [pkg for pkg in ("pan_debs", "workers", "simulator", "benchmarks")
                if re.search(rf"\b{pkg}\.\w", source)]
    assert not {name.split(".")[0] for name in imports(ROOT / "pan" / "cli.py")} - {"pan", "argparse", "logging",
                                                                                    "sys", "importlib", "__future__"}
    commands = {entry.value for entry in entry_points(group="pan.commands")}
    assert {"pan.commands.runtime", "workers.demo_cli", "simulator.simulate_cli",
            "benchmarks.cli"} <= commands



def forbidden_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of ``pan/`` that break the table: into a subpackage not listed, or from a subpackage to the top."""
    found = []
    for name, deps in graph.items():
        source = subpackage(name)
        if source is None:
            continue  # the top-level modules sit above every subpackage
        for dep in deps:
            if layer(dep) != "pan":
                continue
            target = subpackage(dep)
            if target is None or (target != source and target not in SUBPACKAGES[source]):
                found.append((name, dep))
    return sorted(found)


def test_pan_is_its_subpackages_and_a_few_top_level_modules() -> None:
    modules = {module_name(path) for path in (ROOT / "pan").rglob("*.py")}
    top = {name for name in modules if subpackage(name) is None}
    assert top == TOP_LEVEL
    assert len(top - {"pan"}) <= 12
    folders = {path.parent.name for path in (ROOT / "pan").glob("*/__init__.py")}
    assert folders == set(SUBPACKAGES)


def test_subpackages_import_only_what_the_table_allows() -> None:
    assert forbidden_arrows(import_graph()) == []


def test_the_table_runs_bottom_up() -> None:
    """Each subpackage may import only ones listed before it, so the table itself has no cycle."""
    order = list(SUBPACKAGES)
    assert [(name, dep) for name, deps in SUBPACKAGES.items() for dep in deps
            if dep not in order or order.index(dep) >= order.index(name)] == []


def test_a_forbidden_arrow_is_found() -> None:
    graph = {"pan.util.console": {"pan.wire.progress", "orjson"}, "pan.wire.progress": {"pan.http.web"},
             "pan.http.web": {"pan.specs"}, "pan.cli": {"pan.commands.runtime"}}
    assert forbidden_arrows(graph) == [("pan.http.web", "pan.specs"), ("pan.util.console", "pan.wire.progress")]


def test_every_subpackage_says_what_it_is_and_what_it_may_import() -> None:
    """Its ``__init__`` docstring: what it is, then ``May import: ...`` naming the table's row (more may follow)."""
    wrong = []
    for name, allowed in SUBPACKAGES.items():
        doc = ast.get_docstring(ast.parse((ROOT / "pan" / name / "__init__.py").read_text())) or ""
        lines = [*doc.splitlines(), "", ""]
        said = lines[1].removeprefix("May import: ").rstrip(".")
        named = set() if said == "nothing of pan" else {word.strip() for word in said.split(",")}
        if not lines[0] or not lines[1].startswith("May import: ") or lines[2] or named != allowed:
            wrong.append(f"pan/{name}/__init__.py: {doc!r}")
    assert wrong == []



def test_the_architecture_document_shows_the_same_table() -> None:
    """docs/architecture.md draws the tree of ``pan/`` with one line per subpackage, ending in what it may import."""
    document = (ROOT / "docs" / "architecture.md").read_text()
    drawn = {match.group(1): match.group(2).strip()
             for match in re.finditer(r"^  (\w+)/ .*-> (.+)$", document, re.MULTILINE)}
    assert {name: set() if said == "nothing" else {word.strip() for word in said.split(",")}
            for name, said in drawn.items()} == SUBPACKAGES

#: A module over this many lines says why in its docstring, with these words.
MAX_LINES = 500
LONG_REASON = "Longer than 500 lines because"


def test_no_module_is_over_500_lines_unless_it_says_why() -> None:
    folders = ("pan", "workers", "simulator", "benchmarks", "tests", "scripts")
    long = [f"{path.relative_to(ROOT)}: {lines} lines" for folder in folders for path in (ROOT / folder).rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > MAX_LINES
            and LONG_REASON not in (ast.get_docstring(ast.parse(path.read_text())) or "")]
    assert long == []

#: Words of the soccer scenario that the generic core must not contain, in code, names, comments or docstrings:
#: what wears the sources and what the scenario names its streams and CSV fields (``simulator/debs_rows.py``).
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
