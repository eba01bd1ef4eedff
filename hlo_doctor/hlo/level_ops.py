"""The ops of a computation run one by one (its *level*: the entry, a ``while`` body), and which of
them exist only to feed some others.

A fused instruction belongs to the level op that executes it (:func:`~.navigation.entry_op`). These
walks answer "which ops would a program without this value not run": the ops computing a value,
and those among them whose every reader is in a given set.
"""

from __future__ import annotations

from collections.abc import Iterator

from hlo_doctor.hlo import HloInstruction, HloModule, real_work
from hlo_doctor.hlo.navigation import callers, entry_op

__all__ = ["level_users", "only_for", "ops_feeding", "work_inside"]

_MOVE = frozenset({"bitcast", "reshape", "copy"})
_LIMIT = 4096  # instructions visited: the walks are short, the bound guards against malformed input


def _fusion_operand(module: HloModule, param: HloInstruction) -> HloInstruction | None:
    """The caller's operand a fusion parameter stands for."""
    caller = callers(module).get(param.computation)
    if caller is None or caller.opcode != "fusion" or param.parameter_number is None \
            or param.parameter_number >= len(caller.operands):
        return None
    return module.instruction(caller.operands[param.parameter_number], caller.computation)


def ops_feeding(module: HloModule, starts: list[HloInstruction], level: str, stop_ops: set[str],
             stop: set[tuple[str, str]]) -> set[str]:
    """The level ops (in computation ``level``) that compute the values ``starts``.

    Walks back from ``starts`` through every op, inside fused ones too, never into the instructions
    in ``stop`` (``(computation, name)``); level ops named in ``stop_ops`` are walked through (from
    inside, when a start is in one), not collected. For a map before a selection: the ops
    computing its row constants (the max, the sum, ``1 / T``).
    """
    out: set[str] = set()
    stack = list(starts)
    seen: set[tuple[str, str]] = set()
    while stack and len(seen) < _LIMIT:
        v = stack.pop()
        key = (v.computation, v.name)
        if key in seen or key in stop:
            continue
        seen.add(key)
        top = entry_op(module, v)
        if top.computation != level:
            continue
        if top is v:
            if v.name in stop_ops or v.opcode in ("parameter", "constant"):
                continue
            if real_work(v):
                out.add(v.name)
            stack.extend(module.operands_of(v))
        elif top.name in stop_ops:  # a row constant computed inside one of the map's ops: walk on inside
            up = _fusion_operand(module, v) if v.opcode == "parameter" else None
            stack.extend([up] if up is not None else module.operands_of(v))
        else:
            stack.append(top)
    return out


def work_inside(module: HloModule, starts: list[HloInstruction], op: HloInstruction,
               stop: set[tuple[str, str]]) -> list[HloInstruction]:
    """Real work inside level op ``op`` that computes the values ``starts`` (a fused max or sum),
    not reaching into the instructions in ``stop``."""
    out: list[HloInstruction] = []
    stack = [a for a in starts if entry_op(module, a) is op and a is not op]
    seen: set[tuple[str, str]] = set()
    while stack and len(seen) < _LIMIT:
        v = stack.pop()
        key = (v.computation, v.name)
        if key in seen or key in stop or v is op or entry_op(module, v) is not op:
            continue
        seen.add(key)
        if real_work(v) and v.opcode not in ("broadcast", *_MOVE):
            out.append(v)
        stack.extend(module.operands_of(v))
    return out


def level_users(module: HloModule, op: HloInstruction) -> Iterator[HloInstruction | None]:
    """The level ops reading ``op``'s value (through tuple elements and bitcasts); None for the
    computation's result."""
    stack, seen = [op], set()
    while stack:
        v = stack.pop()
        if v.name in seen:
            continue
        seen.add(v.name)
        comp = module.computation(v.computation)
        if comp is not None and comp.root.name == v.name:
            yield None
        for u in module.users_of(v):
            if u.opcode in ("get-tuple-element", "bitcast"):
                stack.append(u)
            else:
                yield u


def only_for(module: HloModule, level: str, candidates: set[str], readers: set[str]) -> set[str]:
    """The candidates whose every reader is another candidate or one of ``readers`` (a fixpoint).

    For a map before a selection, ``readers`` are the selection's op and the source's: only a value
    that does not depend on the source (``1 / T``) can feed the source's op, and there it feeds the
    map XLA fused into it."""
    only = set(candidates)
    changed = True
    while changed:
        changed = False
        for name in sorted(only):
            op = module.instruction(name, level)
            if op is None or any(u is None or (u.name not in only and u.name not in readers)
                                 for u in level_users(module, op)):
                only.discard(name)
                changed = True
    return only
