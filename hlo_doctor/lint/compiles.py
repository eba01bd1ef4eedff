"""Compile accounting: the programs compiled inside the window, and the eager ops compiled apart.

:func:`hlo_doctor.trace.compiles.group_compiles` turns a trace's compile events into one compile per
program built. Here each compile is sorted into:

- an **eager op**: a single-primitive program jax compiled for an op run outside ``jit`` (its module
  has at most :data:`EAGER_MAX_OPS` real ops and no loop, branch or call, and jax itself dispatched
  it: the Python frame calling the dispatch is jax's own, e.g. ``dispatch.py apply_primitive``, or,
  without Python frames, its name is a jax primitive's); these are counted, not named one by one;
- a **program**: everything else, counted per module name. A program compiled in (almost) every
  step of the window, or on (almost) every call of it, is *compiled on every call* (a jitted function
  built afresh per call, a ``while`` of fresh closures run eagerly, inputs whose shape changes).
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_doctor.hlo import HloModule
from hlo_doctor.trace.compiles import Compile, group_compiles

if TYPE_CHECKING:
    from hlo_doctor.lint.context import Context
    from hlo_doctor.trace import CompileEvent

EAGER_MAX_OPS = 3
"""Most real ops (parameters, constants, tuples and bitcasts left out) in an eager op's module: one
primitive, plus the copy or broadcast XLA may add around it."""
EVERY_CALL_SHARE = 0.8
"""A program compiled in at least this share of the window's steps (or of its calls) is compiled on
every call."""
_CONTROL = frozenset({"while", "conditional", "call"})
_NOT_REAL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
# jax primitives (and jnp functions jitted on their own) that an eager call compiles as one program,
# for traces without Python frames. Control flow (while, cond, scan, pjit) is not here: a loop run
# eagerly is a program.
_EAGER_NAMES = frozenset("""
abs acos acosh add and argmax argmin asin asinh atan atan2 atanh bitcast_convert_type broadcast_in_dim
cbrt ceil clamp concatenate conj convert_element_type copy copy_p cos cosh cumsum cumprod cummax cummin
div dot_general dynamic_slice dynamic_update_slice eq exp exp2 expm1 floor gather ge gt imag integer_pow
iota is_finite le log log1p logistic lt max min mul ne neg nextafter not or pad population_count pow
real reduce_and reduce_max reduce_min reduce_or reduce_precision reduce_prod reduce_sum rem reshape rev
round rsqrt scatter scatter-add scatter_add select_n shift_left shift_right_arithmetic
shift_right_logical sign sin sinh slice sort sqrt square squeeze sub tan tanh top_k transpose xor
erf erfc erf_inv lgamma digamma random_bits random_seed random_wrap random_unwrap threefry2x32
_argmax _argmin _broadcast_arrays _where _mean _var _reduce_sum _reduce_max true_divide divide matmul
dot einsum where take clip astype
""".split())


@dataclass(frozen=True, slots=True)
class ProgramCompiles:
    """The compiles of one program (module name) inside the window."""

    module: str
    compiles: tuple[Compile, ...]
    num_steps: int
    calls: int | None
    """Calls of the program in the window (its ``PjitFunction`` spans), when the trace has them."""
    every_call: bool
    source: str
    """The line that builds it: its HLO's own line (the ops' metadata), else the Python frame that
    called jax's dispatch."""

    @property
    def count(self) -> int:
        return len(self.compiles)

    @property
    def time_us(self) -> float:
        return sum(c.duration_us for c in self.compiles)

    @property
    def program_ids(self) -> tuple[int, ...]:
        return tuple(c.program_id for c in self.compiles if c.program_id is not None)

    @property
    def steps_with_compile(self) -> int:
        return len({c.step for c in self.compiles if c.step >= 0})

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "count": self.count, "time_us": self.time_us,
                "program_ids": list(self.program_ids), "steps": self.steps_with_compile, "calls": self.calls,
                "every_call": self.every_call, "source": self.source}


@dataclass(frozen=True, slots=True)
class CompileAccount:
    """Programs compiled in the window (one entry per module name) and eager ops compiled apart."""

    programs: tuple[ProgramCompiles, ...]
    eager: tuple[Compile, ...]
    num_steps: int

    @property
    def eager_us(self) -> float:
        return sum(c.duration_us for c in self.eager)

    @property
    def program_count(self) -> int:
        return sum(p.count for p in self.programs)

    def eager_ops(self) -> list[tuple[str, int]]:
        """(op, compiles) of the eager ops, most compiled first."""
        names = Counter(c.function or c.module.removeprefix("jit_") or "?" for c in self.eager)
        return names.most_common()

    def to_dict(self) -> dict[str, Any]:
        return {"compiles": [p.to_dict() for p in self.programs],
                "eager_compiles": {"count": len(self.eager), "time_us": self.eager_us,
                                   "ops": dict(self.eager_ops())}}

    def line(self) -> str:
        """``compiles in the window: jit_f 3 (on every call); 27 eager ops compiled (1.2 s)``, or ""."""
        if not self.programs and not self.eager:
            return ""
        bits = [f"{p.module or 'an unnamed program'} {p.count}" + (" (on every call)" if p.every_call else "")
                for p in self.programs]
        text = "compiles in the window: " + (", ".join(bits) if bits else "no program")
        if self.eager:
            text += f"; {len(self.eager)} eager op{'s' if len(self.eager) != 1 else ''} compiled ({_ms(self.eager_us)})"
        return text


def _ms(us: float) -> str:
    return f"{us / 1e6:.2f} s" if us >= 1e6 else f"{us / 1000:.1f} ms"


def account_compiles(events: Iterable[CompileEvent], modules: Sequence[HloModule] = (), *, num_steps: int = 0,
                     calls: Mapping[str, int] | None = None, op_lines: Mapping[str, str] | None = None) -> CompileAccount:
    """Sort the compiles of ``events`` into programs and eager ops (see the module's docstring).

    ``modules``: the HLO of the programs (to count their ops and find their line); ``calls``: module
    name -> calls in the window (``jit_<name>`` dispatch spans); ``op_lines``: module name -> the
    line of its ops where no module says it (:func:`table_lines`, a trace JSON's source args).
    """
    by_key = {(m.name, m.program_id): m for m in modules}
    by_name: dict[str, HloModule] = {}
    for m in modules:
        by_name.setdefault(m.name, m)
    programs: dict[str, list[Compile]] = {}
    eager: list[Compile] = []
    for c in group_compiles(events):
        module = by_key.get((c.module, c.program_id)) or by_name.get(c.module)
        if is_eager(c, module):
            eager.append(c)
        else:
            programs.setdefault(c.module, []).append(c)
    out = []
    for name, group in sorted(programs.items(), key=lambda kv: (-sum(c.duration_us for c in kv[1]), kv[0])):
        n_calls = _calls(name, group, calls or {})
        source = _source(name, group, by_key, by_name, op_lines or {})
        out.append(ProgramCompiles(name, tuple(group), num_steps, n_calls, _every_call(group, num_steps, n_calls),
                                   source))
    return CompileAccount(tuple(out), tuple(eager), num_steps)


def compile_account(ctx: Context) -> CompileAccount:
    """:func:`account_compiles` of a diagnosis input (its compile events, modules and dispatch spans)."""
    calls = {d.module: d.calls for d in ctx.host_dispatch}
    return account_compiles(ctx.compile_events, ctx.modules, num_steps=ctx.num_steps, calls=calls,
                            op_lines=table_lines(ctx.table))


def table_lines(table: Any) -> dict[str, str]:
    """Module name -> the line of its ops in an op-stats table: its loop's (a ``while``,
    ``conditional`` or ``call`` row), else its most common line (ties: the row ranked first). The
    same on an xplane and on its trace JSON where the JSON has ``source`` args."""
    if table is None or not len(table) or "source" not in table:
        return {}
    control: dict[str, str] = {}
    lines: dict[str, Counter[str]] = {}
    opcodes = table["opcode"] if "opcode" in table else [""] * len(table)
    for module, source, opcode in zip(table["module"], table["source"], opcodes, strict=True):
        if not isinstance(source, str) or not source:
            continue
        lines.setdefault(str(module), Counter())[source] += 1
        if opcode in _CONTROL:
            control.setdefault(str(module), source)
    return {m: control.get(m) or c.most_common(1)[0][0] for m, c in lines.items()}


def is_eager(c: Compile, module: HloModule | None) -> bool:
    """Whether ``c`` built a single-primitive program for an op run outside ``jit``."""
    if module is not None:
        real = [i for i in module.entry.instructions if i.opcode not in _NOT_REAL]
        if len(real) > EAGER_MAX_OPS or any(i.opcode in _CONTROL for i in real):
            return False
    elif c.function in ("while", "cond", "scan", "pjit", "closed_call", "core_call", "custom_jvp_call",
                        "custom_vjp_call", "remat", "checkpoint", "shard_map", "xla_pmap", "run_state"):
        return False
    caller = _first_file_frame(c.frames)
    if caller:
        return "apply_primitive" in caller or caller.split(":", 1)[0] in _jax_files()
    name = c.function or c.module.removeprefix("jit_")
    return bool(name) and name in _EAGER_NAMES


def _first_file_frame(frames: Sequence[str]) -> str:
    # Python-tracer names: ``file.py:12 func`` for Python code, ``builtins len`` for C functions.
    return next((f for f in frames if ".py:" in f), "")


@lru_cache(maxsize=1)
def _jax_files() -> frozenset[str]:
    """Base names of jax's and jaxlib's Python files (the Python tracer names frames by base name)."""
    names: set[str] = set()
    for package in ("jax", "jaxlib"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec is not None else []:
            names.update(p.name for p in Path(root).rglob("*.py"))
    # Where jax is not installed here: the files of its dispatch path.
    return frozenset(names or {"dispatch.py", "pjit.py", "api.py", "core.py", "lax.py", "array_methods.py",
                               "indexing.py", "slicing.py", "reductions.py", "ufuncs.py", "lax_numpy.py",
                               "array_creation.py", "traceback_util.py", "linear_util.py"})


def _calls(name: str, group: list[Compile], calls: Mapping[str, int]) -> int | None:
    if name in calls:
        return calls[name]
    functions = {c.function for c in group if c.function}
    found = [calls[f"jit_{f}"] for f in functions if f"jit_{f}" in calls]
    return max(found) if found else None


def _every_call(group: list[Compile], num_steps: int, calls: int | None) -> bool:
    n = len(group)
    if n < 2:
        return False
    steps = len({c.step for c in group if c.step >= 0})
    if num_steps >= 2 and steps >= max(2, math.ceil(EVERY_CALL_SHARE * num_steps)):
        return True
    return calls is not None and calls >= 2 and n >= EVERY_CALL_SHARE * calls


def _source(name: str, group: list[Compile], by_key: Mapping[tuple[str, int | None], HloModule],
            by_name: Mapping[str, HloModule], op_lines: Mapping[str, str]) -> str:
    """The line of the program's loop (an eager ``while`` is the loop), else the line of its ops that
    ran (``op_lines``: the op-stats rows, the same from an xplane and from its trace JSON), else the
    most common line of its entry ops, else its caller's Python frame."""
    found = [m for c in group if (m := by_key.get((name, c.program_id)) or by_name.get(name)) is not None]
    for module in found:
        loop = next((i.source for i in module.entry.instructions if i.opcode in _CONTROL and i.source), "")
        if loop:
            return loop
    if op_lines.get(name):
        return op_lines[name]
    for module in found:
        lines = Counter(i.source for i in module.entry.instructions if i.source and i.opcode != "parameter")
        if lines:
            return lines.most_common(1)[0][0]
    for c in group:
        for frame in c.frames:
            if ".py:" in frame and frame.split(":", 1)[0] not in _jax_files():
                return frame
    return ""
