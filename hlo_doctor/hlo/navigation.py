"""Finding one's way in a parsed HLO module: who calls a computation, the entry-level op of an
instruction, the entry parameter a value comes from, the instruction that matters inside a fusion."""

from __future__ import annotations

from hlo_doctor.hlo import HloInstruction, HloModule, HloShape, real_work

__all__ = ["async_copies_before", "callers", "dtype_shape", "entry_op", "entry_parameter_of", "key_instruction"]


# Callers per module, memoised. The module itself is kept beside its index so an id is never
# reused while its entry lives; the memo is bounded (modules of a few runs).
_CALLERS: dict[int, tuple[HloModule, dict[str, HloInstruction]]] = {}
_CALLERS_MAX = 256


def callers(module: HloModule) -> dict[str, HloInstruction]:
    """Computation name -> the instruction that calls it (fusion, reduce, while...)."""
    hit = _CALLERS.get(id(module))
    if hit is not None and hit[0] is module:
        return hit[1]
    out: dict[str, HloInstruction] = {}
    for inst in module.instructions():
        for c in inst.called_computations:
            out.setdefault(c, inst)
    if len(_CALLERS) >= _CALLERS_MAX:
        _CALLERS.pop(next(iter(_CALLERS)))
    _CALLERS[id(module)] = (module, out)
    return out


# Callers whose computations run op by op (each op its own event in a trace), not as one op.
_CONTROL_FLOW = frozenset({"while", "conditional", "call"})


def entry_op(module: HloModule, inst: HloInstruction) -> HloInstruction:
    """The op that executes ``inst`` as one event in a trace: itself, or the outermost fusion (or
    reduce, sort, ...) it is inside. Ops of a ``while`` body or condition, a ``conditional`` branch or
    a ``call`` run one by one, each traced under its own name, so the walk stops there: an op in a
    decode loop's body is its own op (or its fusion in the body), never the loop."""
    by_comp = callers(module)
    cur = inst
    seen: set[str] = set()
    while cur.computation != module.entry_name and cur.computation not in seen:
        seen.add(cur.computation)
        caller = by_comp.get(cur.computation)
        if caller is None or caller.opcode in _CONTROL_FLOW:
            break
        cur = caller
    return cur


def dtype_shape(shape: HloShape) -> str:
    """``f32[512,256000]`` (no layout)."""
    return shape.text(with_layout=False)


def entry_parameter_of(module: HloModule, value: HloInstruction) -> tuple[HloInstruction, HloShape] | None:
    """(entry parameter, shape of the part reached) that ``value`` is, unchanged; None when any
    computation touches it (the part is an element when the parameter is a tuple).

    Follows what only moves a value around: ``bitcast``, ``get-tuple-element`` of a ``tuple``
    (to the tuple's operand), of a fusion whose body passes one of its parameters through to that
    output (XLA:GPU's multi-output fusions), and of a tuple-shaped entry parameter. XLA:GPU writes
    the aliasing copy as ``copy(get-tuple-element(tuple(..., parameter)))``, XLA:CPU as
    ``copy(parameter)``, XLA:TPU as ``copy(parameter)`` or through its alternate memory, an
    asynchronous copy there and back: ``copy(copy-done(copy-start(parameter)))`` (the pair moves the
    value, it does not change it: :func:`async_copies_before`).
    """
    cur: HloInstruction | None = value
    index: int | None = None  # tuple element wanted from ``cur`` (a pending get-tuple-element)
    for _ in range(64):  # a chain of plumbing is short; the bound guards against malformed input
        if cur is None:
            return None
        if cur.opcode == "parameter":
            if cur.computation == module.entry_name:
                if index is None:
                    return cur, cur.shape
                elements = cur.shape.elements
                return (cur, elements[index]) if index < len(elements) else None
            # A fusion parameter: continue at the fusion's operand (only inside a pass-through walk).
            caller = callers(module).get(cur.computation)
            if caller is None or caller.opcode != "fusion" or cur.parameter_number is None:
                return None
            if cur.parameter_number >= len(caller.operands):
                return None
            cur = module.instruction(caller.operands[cur.parameter_number], caller.computation)
            continue
        if cur.opcode in _ASYNC_COPY and index is None and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        if cur.opcode == "bitcast" and index is None and cur.operands:
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        if cur.opcode == "get-tuple-element" and index is None and cur.operands:
            index = int(cur.attribute("index", "0") or 0)
            cur = module.instruction(cur.operands[0], cur.computation)
            continue
        if cur.opcode == "tuple" and index is not None:
            if index >= len(cur.operands):
                return None
            cur, index = module.instruction(cur.operands[index], cur.computation), None
            continue
        if cur.opcode == "fusion" and index is not None:
            body = module.fusion_body(cur)
            if body is None or body.root.opcode != "tuple" or index >= len(body.root.operands):
                return None
            cur, index = module.instruction(body.root.operands[index], body.name), None
            continue
        return None
    return None


_ASYNC_COPY = frozenset({"copy-start", "copy-done"})


def async_copies_before(module: HloModule, value: HloInstruction) -> tuple[HloInstruction, ...]:
    """The asynchronous copy pair (``copy-done``, ``copy-start``) that ``value`` is the end of, through
    bitcasts; empty when it is none. XLA:TPU moves a value into its alternate memory (``S(1)``) with
    such a pair; when the pair only feeds a copy back (the aliasing copy of a returned parameter),
    its time is that copy's too."""
    out: list[HloInstruction] = []
    cur: HloInstruction | None = value
    for _ in range(64):
        if cur is None or not cur.operands:
            break
        if cur.opcode in _ASYNC_COPY:
            out.append(cur)
        elif cur.opcode != "bitcast":
            break
        cur = module.instruction(cur.operands[0], cur.computation)
    return tuple(out)


# Work that dominates a fusion's cost, most expensive kind first: the op "that matters" inside it.
_HEAVY_OPCODES = (
    frozenset({"custom-call", "dot", "convolution", "fft", "triangular-solve", "cholesky"}),
    frozenset({"reduce", "reduce-window", "select-and-scatter", "scatter", "gather", "sort", "topk"}),
)


# Inside a fusion these only index (no arithmetic of their own): never the op that costs while
# other work is there.
_INDEXING_OPCODES = frozenset({"broadcast", "iota", "reshape", "transpose", "slice", "dynamic-slice", "pad",
                               "concatenate", "reverse"})


def key_instruction(module: HloModule, op: HloInstruction) -> HloInstruction:
    """The instruction that matters inside a fusion ``op`` (``op`` itself for anything else).

    The fusion's own metadata is its root's (often a framework helper's line); the op that
    costs is the heaviest inside: a dot or custom call, else a reduction, scatter or gather, else
    the real work with the largest result (broadcasts, iotas and other indexing only when nothing
    else is there). Ties go to an instruction with a source line, then to the fusion's root.
    """
    body = module.fusion_body(op)
    if body is None:
        return op
    inner: list[HloInstruction] = []
    stack = [body]
    seen: set[str] = set()
    while stack:
        comp = stack.pop()
        if comp.name in seen:
            continue
        seen.add(comp.name)
        for i in comp.instructions:
            nested = module.fusion_body(i)
            if nested is not None:
                stack.append(nested)
            elif real_work(i):
                inner.append(i)
    if not inner:
        return op
    for kinds in _HEAVY_OPCODES:
        heavy = [i for i in inner if i.opcode in kinds]
        if heavy:
            inner = heavy
            break
    else:
        inner = [i for i in inner if i.opcode not in _INDEXING_OPCODES] or inner
    return max(inner, key=lambda i: (i.shape.nbytes, bool(i.source), i.is_root))
