"""The parsed HLO data model: instructions, computations, modules, and helpers the rules share."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from hlo_doctor.hlo.frames import Frame, editable_frame, source_frame
from hlo_doctor.hlo.shape import HloShape

# Opcodes that do no arithmetic work of their own: plumbing around the real work.
PLUMBING_OPCODES = frozenset({
    "parameter", "tuple", "get-tuple-element", "constant", "bitcast", "after-all", "partition-id",
    "replica-id", "opt-barrier", "add-dependency",
})


@dataclass(frozen=True, slots=True)
class HloInstruction:
    """One HLO instruction."""

    name: str
    opcode: str
    shape: HloShape
    operands: tuple[str, ...]
    computation: str
    """Name of the computation that holds it."""
    is_root: bool = False
    parameter_number: int | None = None
    called_computations: tuple[str, ...] = ()
    """Computations it calls: ``calls=`` of a fusion, ``to_apply=`` of a reduce, branches..."""
    fusion_kind: str = ""
    attributes: tuple[tuple[str, str], ...] = ()
    """Every other ``key=value`` attribute, as printed."""
    op_name: str = ""
    """The metadata's ``op_name`` (``jit(sample)/reduce``)."""
    source_file: str = ""
    """The innermost frame's file, as the metadata names it (see :attr:`source` for the line shown)."""
    source_line: int = 0
    raw: str = ""
    """The instruction's line, as printed."""
    stack: tuple[Frame, ...] = ()
    """The op's Python stack from the metadata, innermost frame first (one frame when the metadata
    has only ``source_file``/``source_line``; empty without metadata)."""

    @property
    def dtype(self) -> str:
        return self.shape.dtype

    @property
    def frame(self) -> Frame | None:
        """The frame shown for this op: the first outside the frameworks, else the innermost
        (:func:`hlo_doctor.hlo.frames.source_frame`); None without a line."""
        if self.stack:
            return source_frame(self.stack)
        return Frame(self.source_file, self.source_line) if self.source_file else None

    @property
    def source(self) -> str:
        """``file:line`` of :attr:`frame` (the path as captured), or empty."""
        f = self.frame
        if f is None or not f.file:
            return ""
        return f"{f.file}:{f.line}" if f.line else f.file

    @property
    def in_framework(self) -> bool:
        """True when the op has a stack and every frame of it is a framework's: its line is no line of
        the user's or a model library's (an eager op jax staged, a framework's own helper)."""
        stack = self.stack or ((Frame(self.source_file, self.source_line),) if self.source_file else ())
        return bool(stack) and editable_frame(stack) is None

    def attribute(self, key: str, default: str = "") -> str:
        for k, v in self.attributes:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class HloComputation:
    """A computation: the entry, a fusion body, a reducer..."""

    name: str
    instructions: tuple[HloInstruction, ...]
    is_entry: bool = False
    is_fusion: bool = False
    """True when some fusion instruction of the module calls it."""
    execution_thread: str = ""
    """The thread it runs on when not the main one (``}, execution_thread="host"``), else empty."""

    @property
    def root(self) -> HloInstruction:
        for inst in self.instructions:
            if inst.is_root:
                return inst
        return self.instructions[-1]

    @property
    def parameters(self) -> list[HloInstruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number or 0)


@dataclass(frozen=True, slots=True)
class HloModule:
    """A parsed HLO module with instruction and user indexes."""

    name: str
    computations: tuple[HloComputation, ...]
    entry_name: str
    input_output_alias: tuple[tuple[str, int], ...] = ()
    """(output index as printed, parameter number) pairs from ``input_output_alias``."""
    program_id: int | None = None
    text: str = ""
    is_scheduled: bool = False
    """The header says ``is_scheduled=true``: XLA printed it after scheduling (an optimized module)."""
    attributes: tuple[tuple[str, str], ...] = ()
    """The header's ``key=value`` attributes, as printed (``entry_computation_layout``...)."""
    _by_name: dict[str, HloInstruction] = field(default_factory=dict, repr=False, compare=False)
    _users: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    _computations: dict[str, HloComputation] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, HloInstruction] = {}
        users: dict[str, list[str]] = {}
        for comp in self.computations:
            for inst in comp.instructions:
                by_name[_qualify(comp.name, inst.name)] = inst
                by_name.setdefault(inst.name, inst)
                for op in inst.operands:
                    users.setdefault(_qualify(comp.name, op), []).append(inst.name)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_users", {k: tuple(v) for k, v in users.items()})
        object.__setattr__(self, "_computations", {c.name: c for c in self.computations})

    @property
    def entry(self) -> HloComputation:
        return self._computations[self.entry_name]

    @property
    def has_fusions(self) -> bool:
        """True when some computation is a fusion body: XLA's fusion passes have run."""
        return any(c.is_fusion for c in self.computations)

    @property
    def is_optimized(self) -> bool:
        """True for a module XLA has compiled (scheduled or fused), False for one as lowered."""
        return self.is_scheduled or self.has_fusions

    def attribute(self, key: str, default: str = "") -> str:
        """A header attribute's value as printed, or ``default``."""
        for k, v in self.attributes:
            if k == key:
                return v
        return default

    def computation(self, name: str) -> HloComputation | None:
        return self._computations.get(name)

    def instruction(self, name: str, computation: str | None = None) -> HloInstruction | None:
        """Look an instruction up by name (within ``computation`` when given)."""
        if computation is not None:
            return self._by_name.get(_qualify(computation, name))
        return self._by_name.get(name)

    def operands_of(self, inst: HloInstruction) -> list[HloInstruction]:
        out = []
        for op in inst.operands:
            found = self.instruction(op, inst.computation)
            if found is not None:
                out.append(found)
        return out

    def users_of(self, inst: HloInstruction) -> list[HloInstruction]:
        names = self._users.get(_qualify(inst.computation, inst.name), ())
        return [u for n in names if (u := self.instruction(n, inst.computation)) is not None]

    def fusion_body(self, inst: HloInstruction) -> HloComputation | None:
        """The computation a fusion calls, or None for a non-fusion."""
        if inst.opcode != "fusion" or not inst.called_computations:
            return None
        return self.computation(inst.called_computations[0])

    def instructions(self) -> Iterator[HloInstruction]:
        for comp in self.computations:
            yield from comp.instructions

    def entry_instructions(self) -> tuple[HloInstruction, ...]:
        return self.entry.instructions

    def is_live_out(self, inst: HloInstruction) -> bool:
        """True when ``inst``'s value is (part of) the entry computation's result."""
        if inst.computation != self.entry_name:
            return False
        root = self.entry.root
        if inst.name == root.name:
            return True
        if root.opcode == "tuple":
            return inst.name in root.operands
        return False

    def output_indices_of(self, inst: HloInstruction) -> list[int]:
        """Positions of ``inst`` in the entry's ROOT tuple (``[]`` when it is not an output)."""
        root = self.entry.root
        if root.name == inst.name:
            return [0]
        if root.opcode != "tuple":
            return []
        return [i for i, op in enumerate(root.operands) if op == inst.name]

    def aliased_parameters(self) -> set[int]:
        """Parameter numbers that an ``input_output_alias`` (donation) lets the output reuse."""
        return {p for _, p in self.input_output_alias}


def _qualify(computation: str, name: str) -> str:
    return f"{computation}::{name}"


def real_work(inst: HloInstruction) -> bool:
    """True for an instruction that does work (not plumbing such as tuple/parameter/bitcast)."""
    return inst.opcode not in PLUMBING_OPCODES


def fused_opcodes(module: HloModule, inst: HloInstruction) -> list[str]:
    """Opcodes inside a fusion's body (recursively), excluding plumbing; ``[opcode]`` otherwise."""
    body = module.fusion_body(inst)
    if body is None:
        return [inst.opcode]
    out: list[str] = []
    for i in body.instructions:
        if i.opcode == "fusion":
            out.extend(fused_opcodes(module, i))
        elif real_work(i):
            out.append(i.opcode)
    return out


def is_convert_only(module: HloModule, inst: HloInstruction) -> bool:
    """True for a bare ``convert`` or a fusion whose only work is converts (``wrapped_convert``)."""
    if inst.opcode == "convert":
        return True
    ops = fused_opcodes(module, inst) if inst.opcode == "fusion" else []
    return bool(ops) and all(o == "convert" for o in ops)


def operand_shapes(module: HloModule, inst: HloInstruction) -> list[HloShape]:
    return [o.shape for o in module.operands_of(inst)]
