"""Canonical keys: a name for each row of the table that stays the same across recompiles."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from hlo_doctor.hlo import HloInstruction, HloModule, fused_opcodes


def body_digest(module: HloModule | None, inst: HloInstruction | None, operand_shapes: str) -> str:
    """A short hash of what an op does: its fused opcodes and operand shapes (stable across recompiles)."""
    parts: list[str] = [operand_shapes]
    if module is not None and inst is not None:
        parts.extend(fused_opcodes(module, inst))
        parts.append(inst.fusion_kind)
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:6]


_NUM = re.compile(r"(\d+)")


def natural(text: str) -> tuple[Any, ...]:
    """A sort key that orders ``copy.2`` before ``copy.10``."""
    return tuple(int(t) if t.isdigit() else t for t in _NUM.split(text))


def assign_canonical_keys(rows: list[dict[str, Any]], digests: Sequence[str]) -> None:
    """Set ``canonical_key`` on each row: ``module|opcode|shape``, made unique within the table.

    Rows sharing a base key get ``#<digest>`` (a hash of the fused opcodes and operand shapes); rows
    that still collide get ``#<digest>.<n>`` in the order of (op name, program id), deterministic for
    one capture.
    """
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        base = f"{row['module']}|{row['opcode'] or row['op']}|{_strip_layout(row['shape'])}"
        row["canonical_key"] = base
        groups.setdefault(base, []).append(i)
    for base, idx in groups.items():
        if len(idx) == 1:
            continue
        by_digest: dict[str, list[int]] = {}
        for i in idx:
            by_digest.setdefault(digests[i], []).append(i)
        for digest, members in by_digest.items():
            if len(members) == 1:
                rows[members[0]]["canonical_key"] = f"{base}#{digest}"
                continue
            members.sort(key=lambda i: (natural(rows[i]["op"]), rows[i]["program_id"] or -1))
            for n, i in enumerate(members):
                rows[i]["canonical_key"] = f"{base}#{digest}.{n}"


def _strip_layout(shape: str) -> str:
    # Layouts differ between backends and tiling choices; the key keeps dtype and dims only.
    return re.sub(r"\{[^{}]*\}", "", shape)
