"""Where a program and an op come from, so that a finding's fix text can be applied where it is shown.

Three questions decide what a person can do about an op:

- **Eager or jitted.** An op run outside ``jit`` compiles a program of its own, named after the
  primitive or the jax helper that ran it (``jit_convert_element_type``, ``jit__argmax``,
  ``jit_stage``): :func:`eager_op` names it. Such a program has no body a person wrote, nothing to
  donate and nothing to return differently; the fix is at the eager call.
- **A framework's line or one's own.** An op whose stack holds no frame outside the frameworks
  (:mod:`hlo_doctor.hlo.frames`) is written inside a framework: :attr:`HloInstruction.in_framework`,
  :func:`op_framework`, and for a whole program :func:`program_framework`.
- **A staged input or a returned one.** A program that only copies its parameters to its outputs
  is jax moving an input (a NumPy array staged onto the device, an eager ``copy``), not a program
  returning its input: :func:`is_staging_copy`, :func:`staging_cause`.

:func:`origin_of` gathers the three for one op (:class:`OpOrigin`); its :meth:`OpOrigin.where`
says where the line is in words rules put in their messages. Rules and their fix texts read these;
they need HLO only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from hlo_doctor.core.format import fmt_path
from hlo_doctor.hlo.frames import Frame, framework_of
from hlo_doctor.hlo.module import PLUMBING_OPCODES, HloInstruction, HloModule

__all__ = ["OpOrigin", "eager_op", "is_staging_copy", "op_framework", "origin_of", "program_framework",
           "staging_cause"]

_JIT_NAME = re.compile(r"^jit_(.+)$")
_OP_NAME = re.compile(r"^jit\(([^)]*)\)/(.*)$")
_MOVES = frozenset({"copy", "copy-start", "copy-done"})
_SHAPING = _MOVES | {"broadcast", "reshape", "transpose", "iota", "fusion", "slice", "dynamic-slice",
                     "dynamic-update-slice", "concatenate", "pad", "select"}
_DATA_MOVEMENT_PRIMITIVES = frozenset({
    "stage", "copy", "convert_element_type", "device_put", "broadcast_in_dim", "reshape", "transpose", "iota",
    "squeeze", "expand_dims", "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice", "select_n",
})
"""lax primitives whose eager programs often keep no metadata (XLA rewrites their one op)."""

# What jax's eager programs that only copy are for, by the primitive or helper they are named after.
_STAGING_CAUSES = {
    "stage": "jax staging a NumPy (host) array onto the device (jnp.asarray / jnp.array of a NumPy array)",
    "copy": "an eager copy of a jax.Array (jnp.array(x) or x.copy())",
    "convert_element_type": "an eager conversion that changes nothing on the device (jnp.asarray(numpy_array, "
                            "dtype=...) or astype to the dtype it has)",
    "device_put": "jax.device_put of an array that is already there",
}


def _norm(name: str) -> str:
    """A function name as jax writes it into a program name (``<lambda>`` -> ``lambda``)."""
    return re.sub(r"\W+", "_", name).strip("_")


def eager_op(module: HloModule) -> str:
    """The primitive or jax helper an eager program runs (``convert_element_type``, ``while``,
    ``_argmax``, ``stage``), or "" for a jitted program of someone's function.

    A program ``jit_X`` is eager when every op's ``op_name`` is X's own (``jit(while)/while/body/add``:
    one primitive, X, and what runs inside it); when its ops all carry one and the same stack and no
    frame of it is a function X outside the frameworks (a jax helper such as ``_argmax`` or
    ``sqrt`` called from one line: jax leaves its own frames out, so only the caller's stack is
    there, where a jitted function shows its own body; a framework's wrapper of the same name,
    keras' ``sqrt``, is the caller); or when it has no metadata at all, only moves or shapes data,
    and X is one of jax's data-movement primitives (``jit_stage``, ``jit_copy``, ``jit_reshape``)
    or a private helper's name (``jit__moveaxis``).
    """
    m = _JIT_NAME.match(module.name)
    if m is None:
        return ""
    name = _norm(m.group(1))
    ops = [i for i in module.instructions() if i.opcode != "parameter"]
    named = [n for i in ops if i.op_name and (n := _OP_NAME.match(i.op_name)) is not None]
    if named and not all(_norm(n.group(1)) == name for n in named):
        return ""  # ops of another program inlined: not one eager call
    if named and all(_norm(n.group(2).split("/", 1)[0]) == name for n in named):
        return m.group(1)
    stacks = {i.stack for i in ops if i.stack}
    if len(stacks) == 1:
        stack = next(iter(stacks))
        body = any(_norm(f.function.rsplit(".", 1)[-1]) == name and not framework_of(f.file) for f in stack)
        if stack[0].function and not body:
            return m.group(1)
    known = name in _DATA_MOVEMENT_PRIMITIVES or m.group(1).startswith("_")
    if not named and not stacks and known and all(i.opcode in PLUMBING_OPCODES or i.opcode in _SHAPING for i in ops):
        return m.group(1)
    return ""


def is_staging_copy(module: HloModule, inst: HloInstruction) -> bool:
    """True for a copy in a program whose entry only moves its parameters to its outputs (no
    computation at all): jax staging an input or copying it eagerly, not a program of someone's that
    returns its input."""
    if inst.opcode not in _MOVES or inst.computation != module.entry_name:
        return False
    return all(i.opcode in PLUMBING_OPCODES or i.opcode in _MOVES for i in module.entry.instructions)


def staging_cause(module: HloModule) -> str:
    """What a copy-only program is for, in words (``jax staging a NumPy (host) array ...``)."""
    name = eager_op(module)
    return _STAGING_CAUSES.get(name.lstrip("_"), f"an eager {name or module.name} run outside jit that only copies its input")


def op_framework(inst: HloInstruction) -> str:
    """The framework the op's line is inside when no frame of its stack is anyone's own code
    (``keras``, ``jax``, ``python``); "" when a frame is (or the op has no line)."""
    if not inst.in_framework:
        return ""
    frame = inst.frame
    return framework_of(frame.file) if frame is not None else ""


def program_framework(module: HloModule) -> str:
    """The framework a whole program was traced in: "" when some op's stack reaches code a person
    edits or no op has a stack, else the framework most of its ops' lines are in."""
    seen: Counter[str] = Counter()
    for inst in module.instructions():
        if not inst.stack:
            continue
        if not inst.in_framework:
            return ""
        seen[op_framework(inst)] += 1
    return seen.most_common(1)[0][0] if seen else ""


@dataclass(frozen=True, slots=True)
class OpOrigin:
    """Where one op comes from: its program (eager or jitted, a framework's or not) and its line."""

    program: str
    """The module's name."""
    eager: str
    """The eager primitive or helper the program runs (:func:`eager_op`); "" for a jitted program."""
    staging: bool
    """The op is a copy in a program that only moves its inputs (:func:`is_staging_copy`)."""
    framework: str
    """The framework the op's line is inside (:func:`op_framework`); "" when it is one's own."""
    program_framework: str
    """The framework the whole program was traced in (:func:`program_framework`); "" when not."""
    frame: Frame | None
    """The line shown for the op (the first frame outside the frameworks, else the innermost)."""

    @property
    def line(self) -> str:
        """``keras_hub/src/samplers/sampler.py:180``, or "" without a line."""
        if self.frame is None or not self.frame.file:
            return ""
        path = fmt_path(self.frame.file)
        return f"{path}:{self.frame.line}" if self.frame.line else path

    @property
    def editable(self) -> bool:
        """True when the line shown is one a person edits (their code or a model library's)."""
        return self.frame is not None and not self.framework

    def where(self) -> str:
        """Where the line is, for a message: ``at model.py:12``, ``inside keras (keras/src/ops/nn.py:980);
        no frame of code you edit is in its stack``, or "" without a line. An eager program is
        compiled once per shape and cached: its line is the call that traced it first (``first
        traced at``), which may be a warm-up rather than the call on the step's path."""
        at = "first traced at" if self.eager else "at"
        if self.framework:
            line = f" ({at} {self.line})" if self.line else ""
            return f"inside {self.framework}{line}; no frame of code you edit is in its stack"
        return f"{at} {self.line}" if self.line else ""


def origin_of(module: HloModule, inst: HloInstruction) -> OpOrigin:
    """The :class:`OpOrigin` of ``inst`` in ``module`` (its own stack: for a fusion, pass the op
    that matters inside it, :func:`hlo_doctor.hlo.navigation.key_instruction`)."""
    return OpOrigin(program=module.name, eager=eager_op(module), staging=is_staging_copy(module, inst),
                    framework=op_framework(inst), program_framework=program_framework(module), frame=inst.frame)
