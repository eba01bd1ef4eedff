"""What an op's value depends on, to tell work that is the same on every call from work that is not.

A program's values are computed from its entry parameters and from what it holds itself: constants,
``iota``, and random bits drawn from a key that is itself a constant (``rng-bit-generator`` and
jax's threefry hash are deterministic functions of their key). :func:`dependence` gives every
instruction the set of entry parameters its value is computed from, or marks it as changing on its
own (``rng``, infeed/recv, a custom call with side effects). It follows values through fusions,
tuples, calls, conditionals and ``while`` loops: an element of a loop's state depends on its initial
value, on what the body writes into it, and on the condition (which decides how many times it is
written); an element the body passes through unchanged depends on its initial value only.

An op whose value depends on no entry parameter is the same on every call: a program could compute
it once. So is an op that depends only on parameters that hold the same array on every call. XLA
cannot say which parameters those are; :func:`hlo_doctor.hlo.weights.weight_parameters` keeps those
with evidence of being weights. :func:`invariant_groups` puts both together: the ops a trace times one
by one (entry, ``while`` bodies and conditions, branches, called computations) whose values depend
only on constants and weights, joined into groups of ops that feed each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from hlo_doctor.hlo.module import HloComputation, HloInstruction, HloModule, real_work
from hlo_doctor.hlo.navigation import callers
from hlo_doctor.hlo.shape import HloShape

__all__ = [
    "VARYING", "Dependence", "InvariantGroup", "called", "dependence", "flat", "invariant_groups", "loop_invariant_elements", "timed_computations",
]

VARYING = -1
"""The source of a value that changes from call to call by itself (``rng``, infeed, side effects)."""

Dep: TypeAlias = frozenset[int] | tuple["Dep", ...]
"""Entry parameter numbers a value depends on (``VARYING`` among them when it changes by itself);
a tuple of them, element by element, for a tuple-shaped value."""

_NONE: frozenset[int] = frozenset()
_VARY: frozenset[int] = frozenset({VARYING})

# Ops whose result changes from call to call whatever their operands.
_SELF_VARYING = frozenset({
    "rng", "rng-get-and-update-state", "infeed", "recv", "recv-done", "send", "send-done", "outfeed",
})


def flat(dep: Dep) -> frozenset[int]:
    """Every parameter (and ``VARYING``) a possibly tuple-shaped dependence holds."""
    if isinstance(dep, frozenset):
        return dep
    out: frozenset[int] = _NONE
    for d in dep:
        out = out | flat(d)
    return out


def _like(shape: HloShape, dep: frozenset[int]) -> Dep:
    if shape.is_tuple:
        return tuple(_like(e, dep) for e in shape.elements)
    return dep


def _element(dep: Dep, index: int) -> Dep:
    if isinstance(dep, tuple):
        return dep[index] if index < len(dep) else flat(dep)
    return dep


def _union(a: Dep, b: Dep) -> Dep:
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_union(x, y) for x, y in zip(a, b, strict=True))
    return flat(a) | flat(b)


def _add(dep: Dep, extra: frozenset[int]) -> Dep:
    if isinstance(dep, tuple):
        return tuple(_add(d, extra) for d in dep)
    return dep | extra


@dataclass(frozen=True, slots=True)
class Dependence:
    """What every instruction of a module depends on: ``of(inst)`` is a :data:`Dep`."""

    module: HloModule
    deps: dict[tuple[str, str], Dep]

    def of(self, inst: HloInstruction) -> Dep:
        """The instruction's dependence (unknown instructions: changing by themselves)."""
        return self.deps.get((inst.computation, inst.name), _VARY)

    def sources(self, inst: HloInstruction) -> frozenset[int]:
        """The entry parameters (and ``VARYING``) the whole value of ``inst`` depends on."""
        return flat(self.of(inst))


class _Evaluator:
    """Evaluates computations for given parameter dependences, memoised per (computation, inputs)."""

    def __init__(self, module: HloModule) -> None:
        self.m = module
        self.memo: dict[tuple[str, tuple[Dep, ...]], dict[str, Dep]] = {}
        self.final: dict[tuple[str, str], Dep] = {}

    def run(self, comp: HloComputation, params: tuple[Dep, ...], depth: int = 0) -> dict[str, Dep]:
        key = (comp.name, params)
        out = self.memo.get(key)
        if out is None:
            out = {}
            for inst in comp.instructions:
                out[inst.name] = self._instruction(inst, out, params, depth)
            self.memo[key] = out
        # The last evaluation of a computation is the one the analysis settled on (a loop body is
        # evaluated until its state stops growing, then once more inside its caller's evaluation).
        for name, dep in out.items():
            self.final[(comp.name, name)] = dep
        return out

    def _root(self, name: str, params: tuple[Dep, ...], depth: int) -> Dep | None:
        comp = self.m.computation(name)
        if comp is None or depth > 64:
            return None
        return self.run(comp, params, depth + 1)[comp.root.name]

    def _instruction(self, inst: HloInstruction, env: dict[str, Dep], params: tuple[Dep, ...],
                     depth: int) -> Dep:
        ops = [env.get(o, _VARY) for o in inst.operands]
        op = inst.opcode
        if op == "parameter":
            n = inst.parameter_number or 0
            return params[n] if n < len(params) else _like(inst.shape, _VARY)
        if op in ("constant", "iota", "partition-id", "replica-id"):
            return _like(inst.shape, _NONE)
        if op in _SELF_VARYING or (op == "custom-call" and "custom_call_has_side_effect=true" in inst.raw):
            return _like(inst.shape, _VARY)
        if op == "get-tuple-element":
            return _element(ops[0], int(inst.attribute("index", "0") or 0)) if ops else _VARY
        if op == "tuple":
            return tuple(ops)
        if op == "while" and ops:
            return self._while(inst, ops[0], depth)
        if op in ("fusion", "call", "async-start") and inst.called_computations:
            got = self._root(inst.called_computations[0], tuple(ops), depth)
            if got is not None:
                return got
        if op == "conditional" and ops:
            out: Dep = _like(inst.shape, flat(ops[0]))
            for i, branch in enumerate(inst.called_computations):
                got = self._root(branch, (ops[i + 1],) if i + 1 < len(ops) else (), depth)
                out = _union(out, got if got is not None else _VARY)
            return out
        # Everything else (elementwise ops, dots, reductions with their reducer, rng-bit-generator,
        # which is a deterministic function of its state) depends on what its operands depend on.
        union = _NONE
        for d in ops:
            union = union | flat(d)
        return _like(inst.shape, union)

    def _while(self, loop: HloInstruction, init: Dep, depth: int) -> Dep:
        body = called(self.m, loop, "body")
        cond = called(self.m, loop, "condition")
        if body is None or cond is None or depth > 64:
            return _like(loop.shape, flat(init) | _VARY)
        passthrough = loop_invariant_elements(self.m, body)
        state = init
        for _ in range(64):  # each round only grows the sets; a fixed point comes quickly
            written = self.run(body, (state,), depth + 1)[body.root.name]
            trips = flat(self.run(cond, (state,), depth + 1)[cond.root.name])
            new = _union(state, written)
            if isinstance(new, tuple):
                # How often an element is written depends on the condition, too.
                new = tuple(d if i in passthrough else _add(d, trips) for i, d in enumerate(new))
            else:
                new = _add(new, trips)
            if new == state:
                break
            state = new
        return state


def called(m: HloModule, inst: HloInstruction, key: str) -> HloComputation | None:
    """The computation an instruction names under ``key`` (``body``, ``condition``), or None."""
    name = inst.attribute(key).lstrip("%")
    return m.computation(name) if name else None


def loop_invariant_elements(m: HloModule, body: HloComputation) -> frozenset[int]:
    """State elements a ``while`` body returns unchanged (``ROOT tuple(..., gte(param, i), ...)``)."""
    root = body.root
    if root.opcode != "tuple" or not body.parameters:
        return frozenset()
    state = body.parameters[0]
    out = set()
    for i, name in enumerate(root.operands):
        cur = m.instruction(name, body.name)
        while cur is not None and cur.opcode == "bitcast" and cur.operands:
            cur = m.instruction(cur.operands[0], body.name)
        if (cur is not None and cur.opcode == "get-tuple-element" and cur.operands == (state.name,)
                and int(cur.attribute("index", "0") or 0) == i):
            out.add(i)
    return frozenset(out)


def dependence(module: HloModule) -> Dependence:
    """The entry parameters each instruction of ``module`` depends on (see the module docstring)."""
    ev = _Evaluator(module)
    params = tuple(_like(p.shape, frozenset({p.parameter_number or 0})) for p in module.entry.parameters)
    ev.run(module.entry, params)
    return Dependence(module, ev.final)


def timed_computations(module: HloModule) -> list[tuple[HloComputation, HloInstruction | None]]:
    """Computations whose ops a trace times one by one, each with the ``while``/``conditional``/
    ``call`` that runs it (None for the entry)."""
    out: list[tuple[HloComputation, HloInstruction | None]] = [(module.entry, None)]
    seen = {module.entry.name}
    i = 0
    while i < len(out):
        comp = out[i][0]
        i += 1
        for inst in comp.instructions:
            if inst.opcode not in ("while", "conditional", "call"):
                continue
            for name in inst.called_computations:
                sub = module.computation(name)
                if sub is not None and sub.name not in seen:
                    seen.add(sub.name)
                    out.append((sub, inst))
    return out


# -------------------------------------------------------------------------------------------------
# Groups of timed ops that depend only on constants and weights
# -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class InvariantGroup:
    """Timed ops feeding each other whose values depend only on constants and on ``parameters``."""

    ops: tuple[HloInstruction, ...]
    """In program order, the entry's ops first."""
    anchor: HloInstruction
    """The largest array the group hands to work that changes (or to the output): what to keep."""
    parameters: tuple[int, ...]
    """The weights it reads (empty: constants only)."""
    loops: tuple[str, ...]
    """The ``while`` loops outside the group whose bodies hold some of its ops (they run once per
    iteration)."""
    timed: tuple[HloInstruction, ...] = ()
    """The ops whose times add up to the group's: those not run inside another op of the group (a
    trace times a ``while`` with its body's ops inside it)."""
    feeds_work: bool = True
    """Some op that depends on what changes reads its values (False: the group's values are only
    returned, a program of constants or weights alone)."""


def _producers(m: HloModule, inst: HloInstruction) -> list[HloInstruction]:
    """The timed ops whose values ``inst`` reads, through tuples, bitcasts and loop state."""
    by_comp = callers(m)
    out: list[HloInstruction] = []
    stack: list[tuple[HloInstruction, int | None]] = [(o, None) for o in m.operands_of(inst)]
    seen: set[tuple[str, str, int | None]] = set()
    while stack:
        v, index = stack.pop()
        if (v.computation, v.name, index) in seen:
            continue
        seen.add((v.computation, v.name, index))
        if v.opcode == "bitcast" or (v.opcode == "tuple" and index is None):
            stack.extend((o, index) for o in m.operands_of(v))
        elif v.opcode == "get-tuple-element":
            stack.extend((o, int(v.attribute("index", "0") or 0)) for o in m.operands_of(v))
        elif v.opcode == "tuple" and index is not None:
            ops = m.operands_of(v)
            stack.extend([(ops[index], None)] if index < len(ops) else [])
        elif v.opcode == "parameter":
            caller = by_comp.get(v.computation)
            if caller is None or v.computation == m.entry_name:
                continue
            if caller.opcode == "while":
                body = called(m, caller, "body")
                stack.extend((o, index) for o in m.operands_of(caller))  # the initial state
                if body is not None:
                    stack.append((body.root, index))  # what the previous iteration wrote
            elif caller.opcode in ("call", "conditional"):
                ops = m.operands_of(caller)
                k = (v.parameter_number or 0) + (1 if caller.opcode == "conditional" else 0)
                stack.extend([(ops[k], index)] if k < len(ops) else [])
        elif real_work(v):
            out.append(v)
    return out


def _scalar(inst: HloInstruction) -> bool:
    """A value of one element (a loop counter, a constant scale)."""
    return not inst.shape.is_tuple and all(d == 1 for d in inst.shape.dims)


def invariant_groups(m: HloModule, dep: Dependence, weights: set[int] | frozenset[int]) -> list[InvariantGroup]:
    """Groups of timed ops whose values depend only on constants and on the ``weights`` parameters.

    Two ops are in one group when one reads the other's value (through tuples, bitcasts and loop
    state), unless that value is a scalar read by an array (a loop counter the slices of two weights
    read: two works, not one); the ops of a ``while`` that is itself invariant belong to the loop's group.
    """
    runner: dict[str, HloInstruction | None] = {}
    order: list[HloInstruction] = []
    for comp, run_by in timed_computations(m):
        runner[comp.name] = run_by
        order.extend(i for i in comp.instructions if real_work(i))
    pos = {(i.computation, i.name): n for n, i in enumerate(order)}
    allowed = frozenset(weights)
    inv = {k for k, n in pos.items() if dep.sources(order[n]) <= allowed}
    parent = {k: k for k in inv}

    def find(k: tuple[str, str]) -> tuple[str, str]:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    exits: set[tuple[str, str]] = set()
    read: set[tuple[str, str]] = set()  # exits that work which changes reads
    root = m.entry.root
    for inst in order:
        key = (inst.computation, inst.name)
        for p in _producers(m, inst):
            pk = (p.computation, p.name)
            if pk in inv and key in inv:
                if _scalar(p) and not _scalar(inst):
                    continue  # a loop counter or a scale read by work on two weights does not join them
                parent[find(pk)] = find(key)
            elif pk in inv:
                exits.add(pk)  # read by work that changes
                read.add(pk)
        loop = runner.get(inst.computation)
        if key in inv and loop is not None and (loop.computation, loop.name) in inv:
            parent[find(key)] = find((loop.computation, loop.name))  # an invariant loop owns its body
    for p in [root] if real_work(root) else _producers(m, root):
        exits.add((p.computation, p.name))  # returned
    groups: dict[tuple[str, str], list[HloInstruction]] = {}
    for k in sorted(inv, key=pos.__getitem__):
        groups.setdefault(find(k), []).append(order[pos[k]])
    out = []
    for ops in groups.values():
        arrays = [i for i in ops if not i.shape.is_tuple] or ops
        ranked = [i for i in arrays if (i.computation, i.name) in exits] or arrays
        anchor = max(ranked, key=lambda i: (i.shape.nbytes, i.computation == m.entry_name,
                                            pos[(i.computation, i.name)]))
        params = sorted(p for i in ops for p in dep.sources(i))
        outer = [runner.get(i.computation) for i in ops]
        loops = tuple(dict.fromkeys(r.name for r in outer if r is not None and r.opcode == "while"
                                    and (r.computation, r.name) not in inv))
        timed = tuple(i for i, r in zip(ops, outer, strict=True) if r is None or (r.computation, r.name) not in inv)
        feeds = any((i.computation, i.name) in read for i in ops)
        out.append(InvariantGroup(tuple(ops), anchor, tuple(dict.fromkeys(params)), loops, timed, feeds))
    return out
