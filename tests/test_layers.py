"""Data flows one way: config -> golden set and corpus -> backend -> metrics -> strategy and constraints ->
results and report -> the job -> the command line. No module imports from a later step (lazy imports included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rqsweep"
# Module (or package) -> its step; a module may import only from its own step or earlier ones.
STEPS = [
    ("rqsweep", "rqsweep.errors", "rqsweep.files", "rqsweep.knobs", "rqsweep.scope", "rqsweep.scrub",
     "rqsweep.progress", "rqsweep.pacing"),
    ("rqsweep.config",),
    ("rqsweep.corpus", "rqsweep.golden", "rqsweep.judge"),
    ("rqsweep.engine",),
    ("rqsweep.backends", "rqsweep.soat_store", "rqsweep.serve"),
    ("rqsweep.metrics",),
    ("rqsweep.search",),
    ("rqsweep.decide",),
    ("rqsweep.inputs", "rqsweep.dry_run", "rqsweep.draft"),
    ("rqsweep.runfolder",),
    ("rqsweep.report",),
    ("rqsweep.gate",),
    ("rqsweep.sweep", "rqsweep.job", "rqsweep.embedder_sweep"),
    ("rqsweep.cli", "rqsweep.__main__"),
]


def step_of(module: str) -> int:
    best = None
    for step, prefixes in enumerate(STEPS):
        for prefix in prefixes:
            # The package itself is no prefix: a module missing from the map must be placed, not fall to step 0.
            inside = module.startswith(prefix + ".") and prefix != "rqsweep"
            if (module == prefix or inside) and (best is None or len(prefix) > best[1]):
                best = (step, len(prefix))
    assert best is not None, f"{module} is in no step of the data line: add it to STEPS"
    return best[0]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                         or (PACKAGE.parent / f"{node.module}.{a.name}".replace(".", "/")).is_dir())
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "rqsweep" or m.startswith("rqsweep.")}


def test_no_module_imports_against_the_data_line():
    against = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        mine = step_of(module)
        for imported in imports(path):
            if imported != "rqsweep" and step_of(imported) > mine:
                against.append(f"{module} (step {mine}) imports {imported} (step {step_of(imported)})")
    assert against == []


def test_the_check_sees_a_violation():
    # The rule is not vacuous: the job sits after the backends, so a backend importing it would be caught.
    assert step_of("rqsweep.backends.http.seed") < step_of("rqsweep.job")
    assert step_of("rqsweep.config") < step_of("rqsweep.engine.index") < step_of("rqsweep.metrics")


def _edges(path: Path) -> set[str]:
    """What a module imports, as modules: `from rqsweep.report import plots` is the submodule, not the package."""
    found, named = set(), imports(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in named}
            found.update(submodules if len(submodules) == len(node.names) else {node.module})
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("rqsweep.")}


def test_no_module_imports_another_that_imports_it_back_even_lazily():
    # A circle within one step (the embedded backend and its Dask executor once imported each other, the corpus
    # and its pages' reader too) hides which module owns what: a shared part gets a module both import
    # (backends/scoring.py, corpus/model.py).
    graph = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): _edges(p)
             for p in sorted(PACKAGE.rglob("*.py"))}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module == goal:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        return False

    circles = sorted(f"{a} -> {b} -> ... -> {a}" for a, targets in graph.items() for b in targets
                     if b != a and reaches(b, a))
    assert circles == []


def test_the_documented_layout_names_every_module_and_package_and_no_other():
    # docs/architecture.md's layout is the map a newcomer reads: it must not drift from the package.
    block = (PACKAGE.parent / "docs" / "architecture.md").read_text().split("## Layout", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^  ([\w.]+(?:\.py|/))", block, re.M))
    actual = ({p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
              | {p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"})
    assert (sorted(actual - listed), sorted(listed - actual)) == ([], [])
