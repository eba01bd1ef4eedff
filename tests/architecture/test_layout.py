"""The layout's promises, read from the code: stages import one way, rules see only the rule API.

The graph is built from every ``import`` statement in the package that runs (module level and
inside functions alike; not those under ``if TYPE_CHECKING:``), grouped by stage: ``hlo_doctor/<stage>/...`` or ``hlo_doctor/<stage>.py``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hlo_doctor"
RULES = ROOT / "rules"


def _imports(path: Path) -> set[str]:
    """Absolute ``hlo_doctor.*`` module names imported at run time anywhere in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    # Imports for type annotations only (``if TYPE_CHECKING:``) never run: they are not arrows.
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("hlo_doctor"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("hlo_doctor"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def stage_graph() -> dict[str, set[str]]:
    """stage -> the other stages it imports (the bundled engine is left out: it imports nothing of ours)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        stage = rel.parts[0].removesuffix(".py")
        if stage in ("__init__", "engine") or path.name.endswith("_pb2.py"):
            continue
        graph[stage]
        for module in _imports(path):
            target = _stage(module)
            if target and target != stage and ((PACKAGE / target).is_dir() or (PACKAGE / f"{target}.py").is_file()):
                graph[stage].add(target)
    return dict(graph)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_stages_import_without_cycles() -> None:
    graph = stage_graph()
    assert {"core", "trace", "hlo", "opstats", "lint", "fixes", "engines", "verify", "gate", "render", "cli"} <= set(graph)
    assert _cycle(graph) is None, f"import cycle between stages: {' -> '.join(_cycle(graph) or [])}"


def test_core_and_hlo_sit_at_the_bottom() -> None:
    graph = stage_graph()
    assert graph["core"] == set()
    assert graph["hlo"] <= {"core"}


def test_only_the_cli_is_imported_by_nobody() -> None:
    graph = stage_graph()
    importers = {t for targets in graph.values() for t in targets}
    assert "cli" not in importers


def test_rules_import_only_the_rule_api_and_the_hlo() -> None:
    for path in sorted(RULES.glob("hd[0-9][0-9][0-9]_*.py")):
        stages = {_stage(m) for m in _imports(path)}
        assert stages <= {"lint", "hlo"}, f"{path.name} imports {sorted(s for s in stages if s)}"


def test_the_bundled_engine_imports_nothing_of_hlo_doctor() -> None:
    for path in (PACKAGE / "engine").glob("*.py"):
        assert not _imports(path), f"{path.name} imports hlo_doctor"
