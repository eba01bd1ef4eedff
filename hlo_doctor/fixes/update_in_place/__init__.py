"""``update-in-place``: update a stacked buffer's row where it changes, not the whole buffer (HD013).

A loop body that writes a new row into one layer of a stacked buffer and puts the stack back
together writes the whole buffer on every iteration::

    layer = jax.lax.dynamic_update_slice(cache[i], row, (0, t, 0))
    cache = jnp.concatenate([cache[:i], layer[None], cache[i + 1:]], axis=0)

becomes one update of the stacked buffer at the row (and the layer read back from it when it is
read later)::

    cache = jax.lax.dynamic_update_slice(cache, row[None], (i, 0, t, 0))
    layer = cache[i]

``x.at[idx].set(v)`` on ``cache[i]`` becomes ``cache.at[i, idx].set(v)`` the same way. The finding's
line holds the concatenate (or the update it reads). Safe: both forms move the same values to the
same places (the start indices are clamped on the same dimensions of the same sizes; ``i`` is a
non-negative integer, a ``range`` loop's counter or a literal, so ``cache[i]`` and the start ``i``
name the same slab). Refused, with the reason: the new slab is not an update of ``cache[i]`` written
in this function (it comes from a call, as in keras-hub's ``transformer_layer(...)``: which rows it
changes is not visible here), the buffer is read or rebound between the update and the concatenate,
the index may be negative; a buffer re-stacked from a list (``jnp.stack(caches, axis=1)``) is named
and left (this fix rewrites the concatenate form).
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from hlo_doctor.fixes.source.base import Hint, NotApplicable, SiteEdit, SourceExample
from hlo_doctor.fixes.source.code import Change, Code, Codemod, Plan, Result
from hlo_doctor.fixes.update_in_place.examples import INVALID, VALID
from hlo_doctor.fixes.update_in_place.pieces import Rebuild, Update, rebuild_in, restacked, update_of

__all__ = ["FIX", "UpdateInPlace"]


class UpdateInPlace(Codemod):
    """Rewrite a slab update plus a concatenate into one update of the stacked buffer (module docstring)."""

    fix_id: ClassVar[str] = "update-in-place"
    title: ClassVar[str] = "update a stacked buffer's row in place, not the whole buffer"
    VALID: ClassVar[tuple[SourceExample, ...]] = VALID
    INVALID: ClassVar[tuple[SourceExample, ...]] = INVALID

    def candidates(self, code: Code) -> list[int]:
        """Every line holding a concatenate that puts one slab back between a buffer's two parts."""
        return sorted({code.line(s) for line in code.all(cst.SimpleStatementLine) for s in line.body
                       if rebuild_in(code, s) is not None})

    def find(self, code: Code, line: int, hint: Hint) -> Plan | NotApplicable:
        """The update at ``line`` (the concatenate, or the slab update it reads) made in place."""
        stmt = code.statement_at(line)
        if stmt is None:
            return NotApplicable(f"line {line} holds no statement")
        found = rebuild_in(code, stmt)
        if found is None:
            found = self._read_by_rebuild(code, stmt)
        if found is None:
            why = restacked(code, stmt)
            if why:
                return NotApplicable(why, "refused")
            return NotApplicable(f"line {line} holds no jnp.concatenate([buf[:i], x[None], buf[i + 1:]]) "
                                 f"putting an updated slab back into its buffer")
        if isinstance(found, str):
            return NotApplicable(found, "refused")
        update = update_of(code, found)
        if isinstance(update, str):
            return NotApplicable(update, "refused")
        return self._plan(code, found, update)

    def _read_by_rebuild(self, code: Code, stmt: cst.BaseSmallStatement) -> Rebuild | str | None:
        """The rebuild that reads the slab ``stmt`` binds (a finding may name the update's line)."""
        if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name)):
            return None
        name = stmt.targets[0].target.value
        for line in code.all(cst.SimpleStatementLine):
            for s in line.body:
                if code.position(s) > code.position(stmt):
                    found = rebuild_in(code, s)
                    if isinstance(found, Rebuild) and found.slab == name:
                        return found
        return None

    def _plan(self, code: Code, rb: Rebuild, up: Update) -> Plan:
        buf, index = rb.buffer, rb.index
        new = up.in_place(buf, index)
        keep = [n for n in up.reads if n is not rb.slab_node]
        # The update's line becomes the update of the stacked buffer (and the slab read back from it,
        # where something other than the concatenate reads it); the concatenate's line goes.
        lines = [cst.parse_statement(f"{buf} = {new}\n")]
        if keep:
            lines.append(cst.parse_statement(f"{rb.slab} = {buf}[{index}]\n"))
        owner = code.parent(up.stmt)
        assert isinstance(owner, cst.SimpleStatementLine)

        def replace(node: cst.CSTNode) -> Result:
            assert isinstance(node, cst.SimpleStatementLine)
            first = lines[0].with_changes(leading_lines=node.leading_lines, trailing_whitespace=node.trailing_whitespace)
            return cst.FlattenSentinel([first, *lines[1:]])
        changes: dict[cst.CSTNode, Change] = {owner: replace, rb.line_node: cst.RemovalSentinel.REMOVE}
        what = f"{buf} = {new}" + (f"; {rb.slab} = {buf}[{index}]" if keep else "") + \
            f"; drop the concatenate at line {code.line(rb.stmt)}"
        return Plan(SiteEdit(code.line(rb.stmt), what, True), changes)


FIX = UpdateInPlace()
