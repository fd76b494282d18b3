"""Nothing in the repository refers to a file that is not in the repository.

Docs, docstrings, comments and workflow descriptions cite files by their path
(`pan/ingest/server.py`, `docs/ordering.md`, `README.md`).  A cited file that was
moved, renamed or never committed sends a reader nowhere, so every cited path
must exist, relative to the repository root or to the citing file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {"build", "__pycache__", "node_modules"}
TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".yaml", ".yml", ".sh"}
TOP_FOLDERS = "pan|workers|simulator|benchmarks|tests|docs|workflows|scripts|shared|seeds|\\.ci"
FILE_SUFFIXES = "py|md|json|ya?ml|png|svg|csv|toml|sh|txt|html|js"
CITED_PATH = re.compile(
    rf"(?<![\w./-])((?:\.\./)*(?:{TOP_FOLDERS})/[\w./-]*\.(?:{FILE_SUFFIXES}))\b"  # a path under a top folder
    r"|(?<![\w/.-])([A-Z][A-Z_]+\.md)\b"  # a top-level document such as README.md
)


def skipped(folder: str) -> bool:
    return (folder.startswith(".") and folder != ".ci") or folder in SKIPPED or folder.endswith(".egg-info")


def project_text_files() -> list[Path]:
    """The project's own text files: not the venv, git's store, caches or build output."""
    return [
        path
        for path in ROOT.rglob("*")
        if path.is_file()
        and (path.suffix in TEXT_SUFFIXES or path.name in {"Makefile", "run"})
        and not any(skipped(part) for part in path.relative_to(ROOT).parts)
    ]


def cited_paths(text: str) -> list[tuple[int, str]]:
    return [
        (number, match.group(1) or match.group(2))
        for number, line in enumerate(text.splitlines(), 1)
        for match in CITED_PATH.finditer(line)
    ]


def test_the_pattern_finds_paths_and_documents() -> None:
    document = "NOWHERE" + ".md"  # spelled in two parts so that this file cites nothing missing
    text = f"see `pan/ingest/server.py`, docs/ordering.md and {document};\nnot mypan/x.py nor pan/"
    assert cited_paths(text) == [(1, "pan/ingest/server.py"), (1, "docs/ordering.md"), (1, document)]


def test_every_cited_file_exists() -> None:
    missing = []
    for path in project_text_files():
        for number, cited in cited_paths(path.read_text(errors="replace")):
            inside = [(ROOT / cited).resolve(), (path.parent / cited).resolve()]
            if not any(c.is_relative_to(ROOT) and c.exists() for c in inside):
                missing.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert not missing, "files cited but not in the repository:\n" + "\n".join(missing)


#: A dotted name under ``pan`` as docs and docstrings cite modules (``pan.wire.progress``, ``pan.testing``).
CITED_MODULE = re.compile(r"(?<![\w./-])(pan(?:\.[a-z_][a-z0-9_]*)+)")
#: ``pan.X`` words that are no module: file names (``pan.secret``, ``pan.whl``), Arrow metadata keys
#: (``pan.page``, ``pan.json``), entry-point groups, and a benchmark's variable named ``pan``.
NOT_MODULES = {"secret", "whl", "json", "page", "components", "decoders", "commands", "start", "stop", "publishers"}


def missing_module(name: str, root: Path = ROOT) -> bool:
    """Whether a cited dotted name under ``pan`` names no module: each part a package folder, until a module file.

    What follows a module is an attribute, unchecked; the parts of a package's path must all exist.
    """
    parts = name.split(".")
    if parts[1] in NOT_MODULES and len(parts) == 2:
        return False
    path = root / parts[0]
    for part in parts[1:]:
        if (path / f"{part}.py").is_file():
            return False
        if not (path / part).is_dir():
            return True
        path = path / part
    return False


def test_the_module_pattern_finds_a_stale_module(tmp_path: Path) -> None:
    (tmp_path / "pan" / "wire").mkdir(parents=True)
    (tmp_path / "pan" / "wire" / "__init__.py").touch()
    (tmp_path / "pan" / "wire" / "progress.py").touch()
    stale, gone = "pan" + ".web", "pan" + ".wire.pages"  # spelled in parts so that this file cites no module missing
    text = f"see pan.wire.progress.StreamProgress, pan.wire, {stale} and {gone}; pan.secret is a file"
    cited = [match.group(1) for match in CITED_MODULE.finditer(text)]
    assert [name for name in cited if missing_module(name, tmp_path)] == [stale, gone]


def test_every_cited_module_exists() -> None:
    missing = [f"{path.relative_to(ROOT)}:{number}: {match.group(1)}"
               for path in project_text_files()
               for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
               for match in CITED_MODULE.finditer(line) if missing_module(match.group(1))]
    assert not missing, "modules cited but not in the repository:\n" + "\n".join(missing)
