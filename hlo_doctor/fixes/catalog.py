"""The catalog of fixes: every fix's id, whether it is safe, the rules it serves, what it edits.

Plain data: the codemods themselves are imported only when a file is to be read. Two kinds:

- ``tree`` fixes edit a known project laid out in a known way (``bf16-greedy-sampler`` on a
  tpu-inference tree or the reference engine: ``apply-fix FIX --target PATH``);
- ``file`` fixes are codemods at the line a finding names, in any Python file
  (``apply-fix FIX FILE.py[:LINE]``); their code lives in ``hlo_doctor/fixes/<folder>/`` and is
  loaded by :func:`load_source_fix` only when a file is to be read.

**Safe** means output-identical by construction (like ruff's safe fixes): the rewritten program
computes the same values bit for bit, whatever its inputs. **Unsafe** fixes are right for the
programs they were written for but can change a value in a case the source does not rule out (a
rounding tie, an argument's rank, a caller outside the file): ``apply-fix --from RUN`` applies them
only with ``--unsafe``, and ``hlo-doctor verify`` is the check.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hlo_doctor.core.errors import InputError

if TYPE_CHECKING:
    from hlo_doctor.fixes.source.base import SourceFix

__all__ = ["CATALOG", "CatalogEntry", "catalog_entry", "catalog_ids", "fixes_for_rule", "load_source_fix"]


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One fix of the catalog.

    ``rules``: the rule codes whose findings it can remove; ``scope``: ``tree`` (a project, by
    ``--target``) or ``file`` (one Python file, at a line); ``module``: where a file fix's class
    ``FIX`` lives.
    """

    fix_id: str
    title: str
    safe: bool
    rules: tuple[str, ...]
    scope: Literal["tree", "file"]
    summary: str
    module: str = ""

    @property
    def safety(self) -> str:
        """``safe`` or ``unsafe``, as listed."""
        return "safe" if self.safe else "unsafe"


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        "bf16-greedy-sampler", "bf16 greedy sampler (runner, sampler, precompile menu)", True,
        ("HD001", "HD002", "HD003", "HD004", "HD006"), "tree",
        "tpu-inference or the reference engine: no eager widening before sample(), no returned input, "
        "the precompile menu keyed on the model dtype"),
    CatalogEntry(
        "donate-state", "donate the state a jitted call rebinds", True, ("HD009", "HD002", "HD016"), "file",
        "add donate_argnames to the jax.jit (decorator, call or partial) of the function whose state is "
        "copied, when every caller in the file rebinds the argument from the result or never reads it again",
        "hlo_doctor.fixes.donate_state"),
    CatalogEntry(
        "eager-widening", "drop an eager widening before a jitted selection", True, ("HD001", "HD003", "HD004"),
        "file",
        "drop x.astype(float32) / jnp.asarray(x, float32) whose only reader is an argmax, or a jitted function "
        "that only argmaxes it; otherwise move the widening inside that function (unsafe)",
        "hlo_doctor.fixes.eager_widening"),
    CatalogEntry(
        "argmax-without-softmax", "select on the logits, not on a monotone map of them", False, ("HD011",), "file",
        "argmax(softmax(x / T)) -> argmax(x) (also log_softmax, exp, tanh soft caps, positive scales) where "
        "only the selection reads the map; refused where the probabilities are also used",
        "hlo_doctor.fixes.argmax_without_softmax"),
    CatalogEntry(
        "slice-before-matmul", "slice the input of a matmul, not its result", False, ("HD012",), "file",
        "(x @ W)[:, -1] -> x[:, -1] @ W for a static index that leaves the matmul's last dimension whole",
        "hlo_doctor.fixes.slice_before_matmul"),
    CatalogEntry(
        "update-in-place", "update a stacked buffer's row in place, not the whole buffer", True, ("HD013",), "file",
        "x = dynamic_update_slice(buf[i], row, s); buf = concatenate([buf[:i], x[None], buf[i + 1:]]) -> "
        "buf = dynamic_update_slice(buf, row[None], (i, *s)) (also .at[...].set); refused where the slab "
        "comes from a call or the buffer is re-stacked from a list",
        "hlo_doctor.fixes.update_in_place"),
    CatalogEntry(
        "drop-round-trip", "drop a narrowing widened straight back", False, ("HD007",), "file",
        "x.astype(bf16).astype(f32) -> x (h = y.astype(bf16) read only as h.astype(f32) too); unsafe: the "
        "narrowing's rounding goes; refused where the narrow value is read as such",
        "hlo_doctor.fixes.drop_round_trip"),
    CatalogEntry(
        "widen-weights-once", "widen a jitted function's weights once, not on every call", True, ("HD014",), "file",
        "params[\"emb\"].astype(f32) in a jitted step whose callers in the file pass one module-level dict: "
        "PARAMS_F32 = {**PARAMS, \"emb\": PARAMS[\"emb\"].astype(f32)} once, passed instead; refused for a "
        "module's attribute (flax, keras) or weights loaded elsewhere",
        "hlo_doctor.fixes.widen_weights_once"),
    CatalogEntry(
        "init-once", "run the model's initialiser once, not on every call", False, ("HD014",), "file",
        "@functools.cache on the initialiser (init_cache...) an eager generate() calls every time; unsafe: the "
        "result is shared between calls; refused for a random key from the caller, attributes set, or an "
        "initialiser defined in another file",
        "hlo_doctor.fixes.init_once"),
)


def catalog_ids() -> tuple[str, ...]:
    """Every fix id, in catalog order."""
    return tuple(e.fix_id for e in CATALOG)


def catalog_entry(fix_id: str) -> CatalogEntry:
    """The entry of ``fix_id``; :class:`InputError` naming the known ids when there is none."""
    for entry in CATALOG:
        if entry.fix_id == fix_id:
            return entry
    raise InputError(f"unknown fix '{fix_id}'", f"available: {', '.join(catalog_ids())}")


def fixes_for_rule(code: str) -> tuple[CatalogEntry, ...]:
    """The fixes that serve rule ``code``, tree fixes first (they know their project exactly)."""
    served = [e for e in CATALOG if code in e.rules]
    return tuple(sorted(served, key=lambda e: e.scope != "tree"))


def load_source_fix(fix_id: str) -> SourceFix:
    """The codemod of file fix ``fix_id`` (imports libcst)."""
    entry = catalog_entry(fix_id)
    if entry.scope != "file":
        raise InputError(f"{fix_id} edits a project, not one file", f"use: hlo-doctor apply-fix {fix_id} --target PATH")
    fix: SourceFix = importlib.import_module(entry.module).FIX
    return fix
