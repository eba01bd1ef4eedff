"""HD006: the warm-up precompiles sample() for a logits dtype the runner no longer passes."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.lint import Context, Example, Finding, Rule, Severity

RUNNER_FUNCTION = "_sample_from_logits"
MENU_FUNCTION = "_precompile_sampling"
_SKIP_DIRS = frozenset({".git", ".venv", "venv", "site-packages", "node_modules", "__pycache__", "build", "dist"})
_DUMMY_FACTORIES = {"_create_dummy_tensor": 1, "zeros": 1, "ones": 1, "empty": 1, "full": 2}

_RUNNER = '''\
import jax.numpy as jnp
from sampling import sample


class Runner:
    def _sample_from_logits(self, logits, metadata, spec_decode_metadata=None):
        if spec_decode_metadata is None:
{widen}            with self.maybe_forbid_compile:
                next_tokens, processed = sample(self.rng, self.mesh, logits, metadata)
        else:
            raise ValueError("no spec decode")
        return next_tokens
'''
_WIDEN = "            logits = logits.astype(jnp.float32)\n"
_CONDITIONAL_WIDEN = "            if metadata.do_sampling:\n                logits = logits.astype(jnp.float32)\n"

_MANAGER = '''\
import jax.numpy as jnp
from sampling import sample


class CompilationManager:
    def _precompile_sampling(self):
        for num_reqs in self.runner.num_reqs_paddings:
            logits = self._create_dummy_tensor((num_reqs, self.runner.vocab_size), {dtype}, None)
            for do_sampling in (True, False):
                self._run_compilation("sample", sample, self.rng, self.mesh, logits, do_sampling)
'''


def _tree(widen: str, dtype: str) -> dict[str, str]:
    return {
        "pkg/runner/tpu_runner.py": _RUNNER.format(widen=widen),
        "pkg/runner/compilation_manager.py": _MANAGER.format(dtype=dtype),
    }


@dataclass(frozen=True, slots=True)
class _Site:
    path: Path
    line: int
    text: str


class PrecompileKeyMismatch(Rule):
    """The warm-up precompiles ``sample()`` for a logits dtype the runner no longer passes to it.

    What it flags:
        A source tree whose runner (``_sample_from_logits``) passes logits of one dtype to the
        jitted ``sample()`` while the compilation manager (``_precompile_sampling``) builds the
        dummy logits of its precompiled menu with another: the runner no longer widens to f32
        but the menu is still built with ``jnp.float32``, or the menu was rekeyed to the model
        dtype while the runner still widens, or the widening became conditional (some calls f32,
        others the model dtype) with a menu holding only one of them. Read with ``ast``; works on
        tpu-inference trees (``tpu_runner.py``, ``compilation_manager.py``) and on the reference
        engine (``runner.py``, ``compilation_manager.py``).
    Why it costs:
        The precompiled menu is keyed on the input dtype. Calls that are off the menu compile at
        serving time: every bucket compiles again on first use, batch TTFT multiplies and
        throughput drops. Both hand fixes in the original report had this signature (-14% and
        -26% throughput, batch TTFT x5 and x4.4).
    Example:
        ``logits = logits.astype(jnp.float32)`` removed from ``_sample_from_logits`` while
        ``_precompile_sampling`` still does ``self._create_dummy_tensor((n, vocab), jnp.float32)``.
    Fix:
        Change the runtime dtype and the warm-up dtype in one change: ``hlo-doctor apply-fix
        bf16-greedy-sampler`` drops the eager widening and rekeys ``_precompile_sampling`` to the
        model dtype together.
    """

    code = "HD006"
    name = "precompile.key-mismatch"
    severity = Severity.HIGH
    requires = ("source",)
    fix = "bf16-greedy-sampler"

    VALID = (
        Example(source=_tree(_WIDEN, "jnp.float32"), note="original: widen + f32 menu"),
        Example(source=_tree("", "self.runner.model_config.dtype"), note="fully fixed: model dtype both sides"),
        Example(source=_tree("", "jnp.bfloat16"), note="fixed with an explicit bf16 menu"),
        Example(source={"pkg/other.py": "def f():\n    return 1\n"}, note="a tree without a runner"),
    )
    INVALID = (
        Example(source=_tree("", "jnp.float32"), expect=("HD006 ",),
                note="half-fixed: no widening, menu still f32"),
        Example(source=_tree(_WIDEN, "self.runner.model_config.dtype"), expect=("HD006 ",),
                note="half-fixed: menu rekeyed, runner still widens"),
        Example(source=_tree(_CONDITIONAL_WIDEN, "jnp.float32"), expect=("HD006 ",),
                note="widening made conditional on do_sampling"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.source_root is None:
            return
        runners: list[tuple[Path, ast.FunctionDef]] = []
        menus: list[tuple[Path, ast.FunctionDef]] = []
        for path in _python_files(ctx.source_root):
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if RUNNER_FUNCTION not in text and MENU_FUNCTION not in text:
                continue
            try:
                tree = ast.parse(text, filename=str(path))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if node.name == RUNNER_FUNCTION:
                        runners.append((path, node))  # type: ignore[arg-type]
                    elif node.name == MENU_FUNCTION:
                        menus.append((path, node))  # type: ignore[arg-type]
        for rpath, rfunc in runners:
            runtime = _runtime_dtypes(rfunc, rpath)
            if runtime is None or not menus:
                continue
            # The compilation manager nearest the runner (same package), shallowest on a tie.
            mpath, mfunc = max(menus, key=lambda m: (_common_depth(m[0], rpath), -len(m[0].parts)))
            menu = _menu_dtypes(mfunc, mpath)
            if not menu:
                continue
            kinds, runtime_site = runtime
            menu_kinds = {k for k, _ in menu}
            missing = sorted(k for k in kinds if not _on_menu(k, menu_kinds))
            if not missing:
                continue
            site = menu[0][1]
            rel = _rel(site.path, ctx.source_root)
            rrel = _rel(runtime_site.path, ctx.source_root)
            passes = " or ".join(_WORDS[k] for k in sorted(kinds))
            built = ", ".join(sorted(_WORDS[k] for k in menu_kinds))
            yield Finding(
                code=self.code, name=self.name, severity=self.severity,
                message=(f"{RUNNER_FUNCTION} passes {passes} logits to sample() ({rrel}:{runtime_site.line}) "
                         f"but {MENU_FUNCTION} precompiles it for {built} ({rel}:{site.line}): "
                         f"calls with {', '.join(_WORDS[k] for k in missing)} logits compile while serving"),
                source=f"{rel}:{site.line}", fix=self.fix,
                evidence=(f"{rrel}:{runtime_site.line}: {runtime_site.text}",
                          *(f"{_rel(s.path, ctx.source_root)}:{s.line}: {s.text}" for _, s in menu)),
                extra=(("runtime_dtypes", tuple(sorted(kinds))), ("menu_dtypes", tuple(sorted(menu_kinds)))),
            )


_WORDS = {"f32": "float32", "bf16": "bfloat16", "model": "model-dtype"}


def _on_menu(kind: str, menu: set[str]) -> bool:
    # The model dtype of a bf16 model is bf16: an explicit bf16 menu serves unwidened logits.
    return kind in menu or (kind in ("model", "bf16") and bool(menu & {"model", "bf16"}))


def _python_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        # Hidden folders hold backups and tool state (apply-fix keeps the original files there).
        if not _SKIP_DIRS.intersection(parts) and not any(p.startswith(".") for p in parts):
            yield path


def _common_depth(a: Path, b: Path) -> int:
    n = 0
    for x, y in zip(a.resolve().parts, b.resolve().parts, strict=False):
        if x != y:
            break
        n += 1
    return n


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _dtype_kind(node: ast.expr | None) -> str:
    """``f32``, ``bf16`` or ``model`` (any other expression: the model's dtype, a variable...)."""
    if node is None:
        return "model"
    text = ast.unparse(node).strip("'\"")
    last = text.rsplit(".", 1)[-1]
    if last in ("float32", "f32"):
        return "f32"
    if last in ("bfloat16", "bf16"):
        return "bf16"
    return "model"


def _widened_to(node: ast.expr) -> str | None:
    """The dtype kind an ``x.astype(d)`` / ``jnp.asarray(x, dtype=d)`` expression widens to, else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "astype" and node.args:
        return _dtype_kind(node.args[0])
    if isinstance(func, ast.Attribute) and func.attr in ("asarray", "array", "convert_element_type"):
        kw = next((k.value for k in node.keywords if k.arg in ("dtype", "new_dtype")), None)
        if kw is None and len(node.args) > 1:
            kw = node.args[1]
        return _dtype_kind(kw) if kw is not None else None
    return None


def _is_sample_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "sample") or (isinstance(f, ast.Attribute) and f.attr == "sample")


def _logits_arg(call: ast.Call) -> ast.expr | None:
    kw = next((k.value for k in call.keywords if k.arg == "logits"), None)
    if kw is not None:
        return kw
    named = [a for a in call.args if isinstance(a, ast.Name) and "logits" in a.id]
    if named:
        return named[0]
    return call.args[2] if len(call.args) > 2 else None


def _runtime_dtypes(func: ast.FunctionDef, path: Path) -> tuple[set[str], _Site] | None:
    """The logits dtype kinds the runner can pass to ``sample()``, and the line that decides it."""
    lines = path.read_text().splitlines()
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and _is_sample_call(n)]
    if not calls:
        return None
    # The plain (non-speculative) path: the call that passes the function's own logits argument,
    # first in source order (tpu-inference's spec-decode branch samples ``bonus_logits`` later on).
    params = {a.arg for a in func.args.args}
    calls.sort(key=lambda c: (not _passes_own_logits(c, params), c.lineno))
    call = calls[0]
    arg = _logits_arg(call)
    if arg is None:
        return None
    direct = _widened_to(arg)
    if direct is not None:
        return {direct}, _site(path, lines, call.lineno)
    if not isinstance(arg, ast.Name):
        return {"model"}, _site(path, lines, call.lineno)
    var = arg.id
    state: set[str] = {"model"}
    site = _site(path, lines, call.lineno)
    body: list[ast.stmt] = list(func.body)
    while body:
        next_body: list[ast.stmt] = []
        for stmt in body:
            if _contains(stmt, call):
                # Descend into the block that holds the call; statements after it do not matter.
                for block in _blocks(stmt):
                    if any(_contains(s, call) for s in block):
                        next_body = block
                        break
                break
            widen = _assignment_widening(stmt, var)
            if widen is not None:
                state = {widen}
                site = _site(path, lines, stmt.lineno)
                continue
            nested = [(s, w) for s in ast.walk(stmt) if isinstance(s, ast.stmt) and s is not stmt
                      for w in [_assignment_widening(s, var)] if w is not None]
            if nested:
                # A widening under a condition or loop: both dtypes can reach the call.
                state = state | {w for _, w in nested}
                site = _site(path, lines, nested[0][0].lineno)
        body = next_body
    return state, site


def _passes_own_logits(call: ast.Call, params: set[str]) -> bool:
    arg = _logits_arg(call)
    while isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute):
        arg = arg.func.value  # logits.astype(...) passes the same array
    return isinstance(arg, ast.Name) and arg.id in params and "logits" in arg.id


def _assignment_widening(stmt: ast.stmt, var: str) -> str | None:
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in stmt.targets):
        return _widened_to(stmt.value) or None
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == var \
            and stmt.value is not None:
        return _widened_to(stmt.value)
    return None


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    out = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            out.append(block)
    for handler in getattr(stmt, "handlers", []) or []:
        out.append(handler.body)
    return out


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(tree))


def _site(path: Path, lines: list[str], lineno: int) -> _Site:
    text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    return _Site(path, lineno, text)


def _menu_dtypes(func: ast.FunctionDef, path: Path) -> list[tuple[str, _Site]]:
    """(dtype kind, line) of every dummy logits tensor the warm-up builds."""
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        if not any(isinstance(t, ast.Name) and "logits" in t.id for t in node.targets):
            continue
        call = node.value
        fname = call.func.attr if isinstance(call.func, ast.Attribute) else \
            call.func.id if isinstance(call.func, ast.Name) else ""
        if fname not in _DUMMY_FACTORIES:
            continue
        dtype = next((k.value for k in call.keywords if k.arg == "dtype"), None)
        pos = _DUMMY_FACTORIES[fname]
        if dtype is None and len(call.args) > pos:
            dtype = call.args[pos]
        out.append((_dtype_kind(dtype), _site(path, lines, node.lineno)))
    return out
