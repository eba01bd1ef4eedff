"""Which entry parameters are weights: arrays a program reads as weights and never changes.

XLA does not say which parameters hold the same array on every call. A program's own HLO shows how
it reads each one, and that is the evidence :func:`weight_parameters` keeps (see its docstring): a
weight is contracted as the right operand of a matrix product, gathered from by rows, or used as a
convolution kernel; it is never donated, updated in place, or changed by a loop. Activations,
logits and caches fail one of these (the seed's logits are widened on every call, but never read as
a weight).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hlo_doctor.hlo.invariance import called, loop_invariant_elements
from hlo_doctor.hlo.module import HloInstruction, HloModule
from hlo_doctor.hlo.navigation import callers
from hlo_doctor.hlo.shape import FLOAT_DTYPES

__all__ = ["WeightUse", "donated_parameters", "weight_parameters"]

# Ops that hand a value on, possibly in another dtype or layout, without mixing it with another.
_CARRY = frozenset({
    "bitcast", "reshape", "transpose", "copy", "convert", "slice", "dynamic-slice", "copy-start", "copy-done",
    "optimization-barrier", "opt-barrier",
})
_DONOR_BLOCK = "buffer_donor={"


@dataclass(frozen=True, slots=True)
class WeightUse:
    """Why an entry parameter counts as a weight: the op that reads it as one."""

    parameter: HloInstruction
    reader: HloInstruction
    """The ``dot``, ``gather`` or ``convolution`` reading it (inside a fusion or a loop body)."""
    how: str
    """``contracted by dot``, ``rows gathered``, ``convolution kernel``."""
    loop: str = ""
    """The ``while`` it is passed through unchanged on its way to the reader, if any."""


def donated_parameters(m: HloModule) -> set[int]:
    """Parameters the output may reuse: ``input_output_alias`` and ``buffer_donor``."""
    donors = set(m.aliased_parameters())
    header = m.text.split("\n", 1)[0] if m.text else ""
    at = header.find(_DONOR_BLOCK)
    if at >= 0:
        block = header[at + len(_DONOR_BLOCK):header.find("}", at)]
        for item in block.replace("(", " ").replace(")", " ").replace(",", " ").split():
            if item.isdigit():
                donors.add(int(item))
    return donors


def _reads_rows(m: HloModule, gather: HloInstruction) -> bool:
    """True when a gather copies whole rows of its operand (an embedding lookup), not single elements
    (``take_along_axis`` on activations)."""
    ops = m.operands_of(gather)
    sizes = [s for s in gather.attribute("slice_sizes").strip("{}").split(",") if s.strip()]
    if not ops or not sizes:
        return False
    dims = ops[0].shape.dims
    return any(i < len(dims) and int(s) == dims[i] > 1 for i, s in enumerate(sizes))


def _uses(m: HloModule, start: HloInstruction) -> Iterator[tuple[str, HloInstruction, str]]:
    """(kind, op, loop) for the ops that read ``start``'s value as it is handed on (``_CARRY``, tuples,
    fusion and call parameters, loop-invariant ``while`` state). Kinds: ``dot``, ``gather``,
    ``convolution`` (a weight's readers), ``written`` (updated in place), ``state`` (a ``while``
    changes it)."""
    by_comp = callers(m)
    stack: list[tuple[HloInstruction, int | None, str]] = [(start, None, "")]
    seen: set[tuple[str, str, int | None]] = set()
    while stack:
        v, index, loop = stack.pop()
        key = (v.computation, v.name, index)
        if key in seen:
            continue
        seen.add(key)
        comp = m.computation(v.computation)
        caller = by_comp.get(v.computation)
        if comp is not None and comp.root.name == v.name and caller is not None and caller.opcode in ("fusion", "call"):
            stack.append((caller, index, loop))  # a fusion's (or call's) output is the caller's value
        for u in m.users_of(v):
            first = bool(u.operands) and u.operands[0] == v.name
            if index is not None:
                if u.opcode == "get-tuple-element" and int(u.attribute("index", "0") or 0) == index:
                    stack.append((u, None, loop))
                elif u.opcode == "while":
                    body = called(m, u, "body")
                    if body is None or index not in loop_invariant_elements(m, body):
                        yield "state", u, loop
                        continue
                    stack.append((body.parameters[0], index, u.name))
                    stack.append((u, index, loop))
                elif u.opcode in ("fusion", "call"):
                    stack.extend(_callee_params(m, u, v, index, loop))
                continue
            if u.opcode in _CARRY and (first or u.opcode not in ("slice", "dynamic-slice")):
                stack.append((u, None, loop))
            elif u.opcode == "tuple":
                stack.extend((u, k, loop) for k, o in enumerate(u.operands) if o == v.name)
            elif u.opcode in ("fusion", "call"):
                stack.extend(_callee_params(m, u, v, None, loop))
            elif u.opcode in ("dot", "convolution") and u.operands[:2] == (v.name, v.name):
                yield "input", u, loop  # both sides of one product: an activation (x @ x.T), not a weight
            elif u.opcode == "dot" and u.operands[1:2] == (v.name,) and not u.attribute("lhs_batch_dims").strip("{}"):
                yield "dot", u, loop
            elif u.opcode == "gather" and first and _reads_rows(m, u):
                yield "gather", u, loop
            elif u.opcode == "convolution" and len(u.operands) > 1 and u.operands[1] == v.name:
                yield "convolution", u, loop
            elif u.opcode in ("dynamic-update-slice", "scatter") and first:
                yield "written", u, loop


def _callee_params(m: HloModule, call: HloInstruction, v: HloInstruction, index: int | None,
                   loop: str) -> list[tuple[HloInstruction, int | None, str]]:
    body = m.computation(call.called_computations[0]) if call.called_computations else None
    if body is None:
        return []
    params = body.parameters
    return [(params[k], index, loop) for k, o in enumerate(call.operands) if o == v.name and k < len(params)]


_HOW = {"dot": "contracted by", "gather": "rows gathered by", "convolution": "convolution kernel of"}


def weight_parameters(m: HloModule) -> dict[int, WeightUse]:
    """Entry parameters with evidence of being weights, by parameter number.

    A parameter counts when all of these hold: it is a floating-point array (not a tuple; a ``pred``
    mask or an integer table dequantized on every call is not widened by mistake); it is not donated
    (``input_output_alias``, ``buffer_donor``); handed on only through data movement and converts
    (``_CARRY``, tuples, fusion and call parameters), it reaches a ``dot`` without batch dimensions
    (a weight matrix is contracted; attention's ``q @ k`` carries batch dimensions), the table of
    a ``gather`` that copies whole rows (an embedding lookup), or the kernel of a ``convolution``;
    it is never updated in place (operand 0 of a ``dynamic-update-slice`` or ``scatter``) nor read on
    both sides of one product (``x @ x.T``, a convolution of a value with itself); and
    where it enters a ``while``, the body returns it unchanged (not loop-carried state).
    """
    donated = donated_parameters(m)
    out: dict[int, WeightUse] = {}
    for p in m.entry.parameters:
        n = p.parameter_number
        if n is None or n in donated or p.shape.is_tuple or p.shape.dtype not in FLOAT_DTYPES:
            continue  # weights are floating point (a pred mask or an int8 table widened per call is by design)
        evidence: WeightUse | None = None
        for kind, reader, loop in _uses(m, p):
            if kind in ("written", "state", "input"):
                evidence = None
                break
            if evidence is None:
                evidence = WeightUse(p, reader, _HOW[kind], loop)
        if evidence is not None:
            out[n] = evidence
    return out


