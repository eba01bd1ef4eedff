"""The layout's promises, read from the code: stages import one way, no module imports itself back,
rules see only the rule API, verify's kinds of target stand on its core.

The stage graph is built from every ``import`` statement in the package that runs (module level and
inside functions alike; not those under ``if TYPE_CHECKING:``), grouped by stage: ``hlo_doctor/<stage>/...`` or ``hlo_doctor/<stage>.py``.
The module graph counts the same imports module by module, and the type-only ones too: a cycle
broken only by moving one import under ``if TYPE_CHECKING:`` (or into a function) is still a cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

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
        # ``python -m hlo_doctor`` (__main__) is an entry point like the console script: it imports the CLI.
        if stage in ("__init__", "__main__", "engine") or path.name.endswith("_pb2.py"):
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


# Module granularity ------------------------------------------------------------------------------

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every module of the package, the bundled engine's included."""
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import in ``tree`` (module level, in functions, under ``if TYPE_CHECKING:``) and whether it
    is for type annotations only."""
    def walk(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, type_only
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(ast.Module(body=child.body, type_ignores=[]), True)
                yield from walk(ast.Module(body=child.orelse, type_ignores=[]), type_only)
            else:
                yield from walk(child, type_only)
    yield from walk(tree, False)


def module_graph() -> dict[str, dict[str, bool]]:
    """module -> {module it imports: True when only for type annotations}.

    ``from a.b import c`` is an arrow to ``a.b.c`` when that is a module, else to ``a.b``; the parent
    packages that Python initializes on the way are not arrows (else every re-exporting
    ``__init__`` would be a cycle with its own submodules).
    """
    modules = _modules()
    # Compiled modules (a C source beside the Python ones) import nothing of the package: no arrow.
    compiled = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "hlo_doctor").rglob("*.c")}

    def resolve(name: str) -> str | None:
        if name in compiled:
            return None
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, bool]] = {}
    for me, path in modules.items():
        edges: dict[str, bool] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in _import_nodes(tree):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.startswith("hlo_doctor")]
            else:
                base = node.module or ""
                if node.level:
                    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                targets = [resolve(f"{base}.{a.name}") for a in node.names] if base.startswith("hlo_doctor") else []
            for target in targets:
                if target and target != me:
                    edges[target] = edges.get(target, True) and type_only
        graph[me] = edges
    return graph


def module_cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


ENGINE = "hlo_doctor.engine"


def test_no_import_cycle_between_modules() -> None:
    graph = module_graph()
    assert {"hlo_doctor.verify.settings", "hlo_doctor.render.registry", "hlo_doctor.doctor",
            "hlo_doctor.engine.runner"} <= set(graph)
    # The bundled engine copies tpu-inference's files on purpose (the fix must apply to it as to
    # tpu-inference), and its compilation manager annotates the runner that owns it as tpu-inference's
    # does: a type-only arrow back. Its run-time imports are held like everyone's.
    for module, edges in graph.items():
        if module.startswith(ENGINE + "."):
            graph[module] = {target: False for target, type_only in edges.items() if not type_only}
    described = []
    for group in module_cycles(graph):
        arrows = [f"{a} -> {b}" + (" (type only)" if graph[a][b] else "")
                  for a in group for b in sorted(graph[a]) if b in group]
        described.append("; ".join(arrows))
    assert not described, "import cycles between modules:\n" + "\n".join(described)


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function_or_under_type_checking() -> None:
    # The two cycles verify and doctor had: a function-level import one way, a type-only one back.
    graph = {"a.target": {"a.bench": False}, "a.bench": {"a.target": False}, "a.core": {},
             "a.doctor": {"a.render": False}, "a.render": {"a.doctor": True}}
    assert module_cycles(graph) == [["a.bench", "a.target"], ["a.doctor", "a.render"]]
    assert module_cycles({"a": {"b": False}, "b": {}}) == []


# verify/: the A/B core and one subpackage per kind of target ------------------------------------

VERIFY = "hlo_doctor.verify"
KINDS = ("engine", "tpu_inference", "program")
"""The kinds of target verify measures, each a subpackage (``program``: any FILE.py:func)."""


def _kind(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and (PACKAGE / "verify" / parts[2]).is_dir()) else None


def test_verify_core_imports_no_kind_of_target_and_kinds_stand_on_the_core() -> None:
    graph = module_graph()
    assert {f"{VERIFY}.{k}" for k in KINDS} <= set(graph)
    for module, edges in graph.items():
        if not module.startswith(VERIFY + ".") or module == VERIFY:
            continue  # verify/__init__ re-exports the engine A/B's API: it may import a kind
        kind = _kind(module)
        for target in edges:
            if not target.startswith(VERIFY + "."):
                continue
            other = _kind(target)
            if kind is None:
                assert other is None, f"the verify core module {module} imports {target}"
            else:
                # A kind imports the core, itself, and the engine A/B (tpu-inference's --bench on an
                # engine tree checks its HLO as the engine A/B does); never the other way round.
                assert other in (None, kind, "engine"), f"{module} imports {target}"


def test_one_compile_counter() -> None:
    """Outside the bundled engine, only verify/compiles.py counts compiles (through the engine's log)."""
    counters = []
    for module, path in _modules().items():
        if module == ENGINE or module.startswith(ENGINE + "."):
            continue
        text = path.read_text(encoding="utf-8")
        if "register_event_duration" in text or "recompilation import" in text or "CompileWatch(" in text:
            counters.append(module)
    assert counters == [f"{VERIFY}.compiles"]


def _any_annotations(path: Path) -> Iterator[str]:
    """``name -> Any`` returns, and ``name(arg: Any)`` parameters of public functions, in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.returns is not None and ast.unparse(node.returns) in ("Any", "typing.Any"):
            yield f"{path.name}:{node.lineno} {node.name} -> Any"
        if node.name.startswith("_") and not node.name.startswith("__"):
            continue
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for arg in args:
            if arg.annotation is not None and ast.unparse(arg.annotation) in ("Any", "typing.Any"):
                yield f"{path.name}:{node.lineno} {node.name}({arg.arg}: Any)"


@pytest.mark.parametrize("path", sorted([*(PACKAGE / "verify").rglob("*.py"), PACKAGE / "doctor.py",
                                         *(PACKAGE / "render").glob("verify*.py"), PACKAGE / "render" / "doctor.py",
                                         PACKAGE / "render" / "registry.py"]),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_verify_boundaries_are_typed(path: Path) -> None:
    """No ``Any`` where a value crosses verify's boundaries: typed values (dataclasses, Protocols)."""
    assert list(_any_annotations(path)) == []
