"""xprof's own reading of a trace: its ``hlo_stats`` tool, as rows keyed by column id."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path


def xprof_hlo_stats(paths: list[Path]) -> list[dict[str, object]]:
    """xprof's ``hlo_stats`` rows for these xplanes, each as {column id: value}.

    Runs xprof's conversion on copies in a temporary directory (it writes cache files beside its
    input). Columns are looked up by ``id`` because their order changes between releases. Empty for
    XLA:CPU traces, and when xprof cannot convert the trace.
    """
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:  # pragma: no cover - xprof is a dependency
        return []
    with tempfile.TemporaryDirectory(prefix="hlo-doctor-xprof-") as tmp:
        copies = []
        for p in paths:
            copy = Path(tmp) / p.name
            shutil.copy(p, copy)
            copies.append(str(copy))
        try:
            data, _ = raw_to_tool_data.xspace_to_tool_data(copies, "hlo_stats", {})
        except Exception:  # noqa: BLE001 - xprof's converter raises anything on traces it dislikes
            return []
    if not data:
        return []
    try:
        doc = json.loads(data)
    except (TypeError, ValueError):
        return []
    return datatable_rows(doc)


def datatable_rows(doc: object) -> list[dict[str, object]]:
    """Rows of a Google DataTable JSON (``cols`` with ids, ``rows`` of ``{"c": [{"v": ...}]}``)."""
    if isinstance(doc, list):
        doc = doc[0] if doc else {}
    if not isinstance(doc, dict):
        return []
    ids = [str(c.get("id", "")) for c in doc.get("cols", []) if isinstance(c, dict)]
    rows = []
    for row in doc.get("rows", []) or []:
        cells = row.get("c", []) if isinstance(row, dict) else []
        rows.append({ids[i]: (cell.get("v") if isinstance(cell, dict) else None)
                     for i, cell in enumerate(cells) if i < len(ids)})
    return rows
