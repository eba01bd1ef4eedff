"""Outputs of a program that pass state back to the caller and that no program reads.

A decode step returns its state (tokens, caches, positions) for the next call to take back. When a
part of that state is never read (log-probabilities or logits kept "for later"), jit drops the next
call's matching argument as unused (or keeps it with no user, ``keep_unused``): the program still
computes and writes the part on every call. :func:`state_outputs` lists a program's outputs that are
written by its own work (not an argument passed through, not a donated argument's buffer), with the
entry-level ops that feed only that output (what dropping it removes) and the argument that stands
for it where one is left without a user. Whether any program reads a value of its shape and dtype
is the caller's question (:func:`reads`), since it spans the programs of a capture.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_doctor.hlo import HloInstruction, HloModule, HloShape

__all__ = ["StateOutput", "reads", "state_outputs"]

# Below this an output is a token, a position or a flag, not a buffer worth a finding.
MIN_BYTES = 64 * 1024
_FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast"})


@dataclass(frozen=True, slots=True)
class StateOutput:
    """Element ``index`` of a program's output, written by its own work."""

    module: HloModule
    index: int
    shape: HloShape
    producer: HloInstruction
    """The entry-level op whose value is the output (through bitcasts and tuple elements)."""
    only_feeds: tuple[HloInstruction, ...]
    """Entry-level ops whose values reach nothing but this output (entry order)."""
    unused_parameter: HloInstruction | None
    """A parameter of the same shape and dtype that no op reads (kept by ``keep_unused``), if any."""


def state_outputs(module: HloModule) -> list[StateOutput]:
    """Outputs of a program that returns donated state, written by its own work; see the module."""
    root = module.entry.root
    if root.opcode != "tuple":
        return []
    params = [p for p in module.entry.instructions if p.opcode == "parameter"]
    unused = [p for p in params if not module.users_of(p) and not p.shape.is_tuple]
    aliased_outputs = {out.strip("{} ") for out, _ in module.input_output_alias}
    if not aliased_outputs and not unused:
        return []  # no state passed back: an output is the caller's result
    out: list[StateOutput] = []
    for k, name in enumerate(root.operands):
        value = module.instruction(name, module.entry_name)
        if value is None or value.shape.is_tuple or value.shape.nbytes < MIN_BYTES or str(k) in aliased_outputs:
            continue
        producer = _producer(module, value)
        if producer is None or producer.opcode in ("parameter", "constant"):
            continue
        match = next((p for p in unused if _same(p.shape, value.shape)), None)
        out.append(StateOutput(module=module, index=k, shape=value.shape, producer=producer,
                               only_feeds=_only_feeding(module, value, k), unused_parameter=match))
    return out


def reads(module: HloModule, shape: HloShape) -> bool:
    """True when a parameter of ``module``'s entry with ``shape``'s dims and dtype has a user."""
    return any(p.opcode == "parameter" and _same(p.shape, shape) and module.users_of(p)
               for p in module.entry.instructions)


def _same(a: HloShape, b: HloShape) -> bool:
    return a.dims == b.dims and a.dtype == b.dtype and not a.is_tuple and not b.is_tuple


def _producer(module: HloModule, value: HloInstruction) -> HloInstruction | None:
    cur: HloInstruction | None = value
    for _ in range(16):
        if cur is None or cur.opcode not in ("bitcast", "get-tuple-element", "copy"):
            return cur
        cur = _first(module, cur)
    return cur


def _only_feeding(module: HloModule, value: HloInstruction, index: int) -> tuple[HloInstruction, ...]:
    """Entry-level ops whose every use leads only to output ``index``."""
    root = module.entry.root
    feeds: set[str] = set()
    for inst in reversed(module.entry.instructions):
        if inst is root or inst.opcode in ("parameter", "constant"):
            continue
        users = module.users_of(inst)
        at = [i for i, o in enumerate(root.operands) if o == inst.name]
        if users and at in ([], [index]) and all(u.name in feeds or u is root for u in users) and (
                at or any(u.name in feeds for u in users)):
            feeds.add(inst.name)
    return tuple(i for i in module.entry.instructions if i.name in feeds and i.opcode not in _FREE)


def _first(module: HloModule, inst: HloInstruction) -> HloInstruction | None:
    """``inst``'s first operand, or None."""
    ops = module.operands_of(inst)
    return ops[0] if ops else None
