"""CLI: ``hlo-doctor report INPUT -o FILE.html``: one self-contained page with charts (or Markdown
with the charts as images) of a capture, a diagnosis, a ``verify --out`` or ``doctor --out`` folder,
or a gate verdict.

Pages are built from the JSON documents the other commands write (:mod:`hlo_doctor.render.html`);
a capture is read once (op stats) and diagnosed from that same table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hlo_doctor.cli.common import (
    announce_capture,
    console,
    examples,
    handle_errors,
    write_file_atomically,
    write_output,
)
from hlo_doctor.core.blas import start_numpy_reading
from hlo_doctor.core.errors import InputError

if TYPE_CHECKING:
    from hlo_doctor.lint import Diagnosis
    from hlo_doctor.opstats import OpStats

__all__ = ["COMMANDS", "EXPECTED", "build_page", "report_cmd", "write_capture_report", "write_verify_report"]

EXPECTED = ("a capture (run directory, xprof log directory, .xplane.pb, trace JSON or opstats.json), "
            "a diagnosis JSON (diagnose --format json), a memory JSON (memory --format json), a verify --out "
            "folder (verify.json), a doctor --out folder (doctor.json) or a gate JSON (gate --format json)")
"""What ``report`` reads, for its help and its error line."""

_SCHEMAS = ("opstats", "diagnosis", "memory", "verify", "verify-target", "doctor", "gate")


def _charts_folder(folder: Path) -> Path:
    """The folder of a Markdown report's chart images, created; a link or a file in its place is exit 2
    (a link planted there would send the images, and what overwrites them, outside)."""
    import os
    import stat

    for attempt in range(2):
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            if attempt:
                break
            try:
                folder.mkdir(parents=True)
            except FileExistsError:
                pass
            except OSError as exc:
                raise InputError(f"{folder}: cannot create it ({exc.strerror})", "choose a writable output path") from None
            continue
        if stat.S_ISDIR(mode):
            return folder
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
        raise InputError(f"{folder}: {what}, where the report's chart images go; nothing was written",
                         "remove it or choose another -o")
    raise InputError(f"{folder}: cannot create it", "choose a writable output path")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})", f"pass {EXPECTED}") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply (past the interpreter's stack)", f"pass {EXPECTED}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: a JSON {type(doc).__name__}, not an object", f"pass {EXPECTED}")
    return doc


def _is_document(path: Path) -> bool:
    """Whether the file ``path`` is one of hlo-doctor's JSON documents rather than a capture: a
    ``.json`` name (a trace JSON's names end in ``.trace.json``), or, under any other name (a
    ``diagnose -o findings.out``), its opening bytes carry an hlo-doctor ``schema`` tag."""
    if path.name.endswith((".trace.json", ".json.gz", ".pb")):
        return False
    if path.suffix == ".json":
        return True
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"hlo-doctor.' in head


def _kind(doc: Mapping[str, Any]) -> str | None:
    """The subject of an hlo-doctor JSON document, from its schema tag (or, untagged, its keys)."""
    schema = str(doc.get("schema", doc.get("format", "")))
    for name in sorted(_SCHEMAS, key=len, reverse=True):
        if schema.startswith(f"hlo-doctor.{name}/"):
            return name
    # Untagged documents of older releases: verify.json and opstats.json before their schema tags.
    if "checks" in doc and isinstance(doc.get("baseline"), Mapping) and "rounds" in doc["baseline"]:
        return "verify"
    if "rows" in doc and "step_time_us" in doc:
        return "opstats"
    return None


def _diagnosis_of(stats: OpStats, path: Path) -> Diagnosis:
    """The rules on a capture's op stats, from the read that built them (the trace is not read again)."""
    from hlo_doctor.lint import Context, diagnose, executed_modules, load_context, load_rulebook
    from hlo_doctor.lint.dispatch import read_host_dispatch
    from hlo_doctor.lint.measurement import measure_budget
    from hlo_doctor.lint.store import MeasurementStore, store_capture
    from hlo_doctor.opstats.step_times import StepTimes
    from hlo_doctor.trace import find_xplanes

    budget_s = measure_budget()
    if not stats.modules:
        return diagnose(replace(load_context(path), what_if=True, measurements=MeasurementStore(store_capture(path)),
                                measure_seconds=budget_s), load_rulebook())
    ctx = Context(modules=executed_modules(stats.modules, stats.table), table=stats.table,
                  step_time_us=float(stats.step_time_us or 0) or None, num_steps=int(stats.num_steps or 0),
                  step_times_us=StepTimes(getattr(stats, "step_times_us", ()) or ()),
                  compile_events=tuple(stats.compile_events), breakdown=stats.breakdown, backend=stats.backend,
                  device_kind=str(stats.device_kind or ""),
                  origin=str(path), kind="run" if path.is_dir() else "xplane", versions=tuple(stats.versions),
                  what_if=True, measurements=MeasurementStore(store_capture(path)),  # as diagnose: measured once, kept, reused
                  measure_seconds=budget_s)
    if not path.name.endswith(".json"):
        ctx = replace(ctx, host_dispatch=read_host_dispatch(find_xplanes(path)))
    return diagnose(ctx, load_rulebook())


def _memory_doc(path: Path, stats: OpStats) -> dict[str, Any] | None:
    """The memory JSON of a capture with buffer assignments (its xplanes' metadata planes, the modules
    the op stats already parsed); None for one without (a trace JSON, a table export)."""
    from hlo_doctor.memory import read_memory, runs_per_step
    from hlo_doctor.render.memory import to_json

    if path.name.endswith(".json") or (path.is_dir() and not any(path.rglob("*.xplane.pb"))):
        return None
    try:
        report = read_memory(path, runs=runs_per_step(stats.table, int(stats.num_steps or 0)), modules=stats.modules)
    except InputError:
        return None
    return dict(json.loads(to_json(report)))


def _capture_docs(path: Path, read: Callable[[], None] = lambda: None
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """(op stats JSON, diagnosis JSON, memory JSON or None) of a capture, from one read of it.
    ``read`` is called once the capture is read (the command's first line: which capture), before
    the diagnosis, whose measurements (a replay, an A/B, a what-if) are each a stage of the
    command's progress."""
    from hlo_doctor.cli.progress import progress_bars
    from hlo_doctor.lint import diagnose, load_context, load_rulebook
    from hlo_doctor.lint.activity import reported_to
    from hlo_doctor.opstats import load_opstats
    from hlo_doctor.render.diagnosis import to_json as diagnosis_json
    from hlo_doctor.render.html.subjects import capture_doc

    export = path / "opstats.json"
    if path.is_dir() and export.is_file() and not any(path.rglob("*.xplane.pb")):
        # A table export with the run's modules as *.hlo.txt beside it (the sample traces).
        stats = load_opstats(export)
        read()
        return capture_doc(stats), json.loads(diagnosis_json(diagnose(load_context(path), load_rulebook()))), None
    stats = load_opstats(path)
    read()
    with progress_bars() as progress, reported_to(progress):
        diagnosis = _diagnosis_of(stats, path)
    return capture_doc(stats), json.loads(diagnosis_json(diagnosis)), _memory_doc(path, stats)


def write_capture_report(run_dir: Path, stats: OpStats) -> Path:
    """``report.html`` in a run directory ``profile`` just wrote, with its diagnosis (charts when the
    'report' extra is installed, tables otherwise)."""
    from hlo_doctor.render.diagnosis import to_json as diagnosis_json
    from hlo_doctor.render.html.subjects import capture_doc, capture_html

    target = run_dir / "report.html"
    memory = _memory_doc(run_dir, stats)
    write_file_atomically(target, capture_html(capture_doc(stats), diagnosis_json(_diagnosis_of(stats, run_dir)),
                                               json.dumps(memory) if memory is not None else None))
    return target


def write_verify_report(out_dir: Path) -> Path:
    """``report.html`` beside the ``verify.json`` of a ``verify --out`` folder."""
    from hlo_doctor.render.html.subjects import verify_html

    target = out_dir / "report.html"
    write_file_atomically(target, verify_html((out_dir / "verify.json").read_text(encoding="utf-8")))
    return target


def _stats_beside(diagnosis: Mapping[str, Any], origin: Path) -> tuple[dict[str, Any] | None, str]:
    """The op stats of the capture a diagnosis names, when it is at hand: (doc, why not). The capture
    itself is read where it is there (its breakdown and every column), else its ``opstats.json``."""
    from hlo_doctor.opstats import load_opstats
    from hlo_doctor.render.html.subjects import capture_doc

    given = Path(str(diagnosis.get("input", "")))
    for candidate in (given, origin.parent / given.name):
        if not str(given) or not candidate.exists():
            continue
        if candidate.is_dir() and not any(candidate.rglob("*.xplane.pb")):
            candidate = candidate / "opstats.json"
        if candidate.exists():
            return capture_doc(load_opstats(candidate)), ""
    return None, f"its capture ({given}) is not at hand"


def _doctor_page(folder: Path) -> Any:
    from hlo_doctor.render.html import doctor_page

    missing: list[str] = []
    docs: dict[str, dict[str, Any] | None] = {}
    for name, rel in (("diagnosis", "diagnose.json"), ("stats", "profile/opstats.json"), ("verify", "verify.json")):
        p = folder / rel
        docs[name] = _read_json(p) if p.is_file() else None
        if docs[name] is None:
            missing.append(f"what {rel} draws: the folder has no {rel}")
    return doctor_page(_read_json(folder / "doctor.json"), docs["diagnosis"], docs["stats"], docs["verify"],
                       tuple(missing))


def build_page(path: Path) -> Any:
    """The :class:`~hlo_doctor.render.html.Page` of INPUT; :class:`InputError` naming what was expected."""
    try:
        return _build_page(path)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        # A nested field the kind's check does not cover, of the wrong shape: the artifact's fault.
        raise InputError(f"{path}: a document with a field of the wrong shape ({type(exc).__name__}: {exc})",
                         f"pass {EXPECTED} as hlo-doctor writes it") from None


def _build_page(path: Path) -> Any:
    from hlo_doctor.render.html import capture_page, diagnosis_page, gate_page, memory_page, verify_page

    if not path.exists():
        raise InputError(f"{path} does not exist", f"pass {EXPECTED}")
    if path.is_dir():
        if (path / "doctor.json").is_file():
            return _doctor_page(path)
        if (path / "verify.json").is_file():
            from hlo_doctor.render.html.documents import check_document

            doc = _read_json(path / "verify.json")
            check_document(doc, _kind(doc) or "verify", str(path / "verify.json"))
            return verify_page(doc)
        has_capture = (path / "opstats.json").is_file() or any(path.rglob("*.xplane.pb"))
        if not has_capture:
            raise InputError(f"{path}: none of the inputs report reads is in this folder", f"expected {EXPECTED}")
        return capture_page(*_capture_docs(path, announce_capture(path)))
    if not _is_document(path):
        try:
            say_capture = announce_capture(path)
            docs = _capture_docs(path, say_capture)
        except InputError as exc:
            # The capture reader's line, and every kind of input report reads (a diagnosis JSON too).
            raise InputError(exc.what, f"pass {EXPECTED}") from None
        return capture_page(*docs)
    doc = _read_json(path)
    kind = _kind(doc)
    if kind is not None:
        from hlo_doctor.render.html.documents import check_document

        check_document(doc, kind, str(path))
    if kind == "opstats":
        return capture_page(*_capture_docs(path))
    if kind == "diagnosis":
        stats, why = _stats_beside(doc, path)
        return diagnosis_page(doc, stats, why)
    if kind == "memory":
        return memory_page(doc)
    if kind in ("verify", "verify-target"):
        return verify_page(doc)
    if kind == "doctor":
        return _doctor_page(path.parent)
    if kind == "gate":
        return gate_page(doc)
    raise InputError(f"{path}: not a JSON document hlo-doctor wrote (no known 'schema')", f"expected {EXPECTED}")


@click.command("report", epilog=examples(
    "hlo-doctor report runs/decode -o decode.html            # a capture: the step, the top ops, findings",
    "hlo-doctor report runs/doctor -o doctor.html            # a doctor --out folder: found, fixed, measured",
    "hlo-doctor report gate.json --format md -o gate.md      # Markdown, charts as SVG files in gate-charts/",
))
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--output", "-o", "output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The page (or Markdown) to write [default: report.html, or report.md with --format md].")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html", show_default=True,
              help="html: one self-contained page (charts drawn in the browser, nothing fetched); md: "
                   "Markdown with the charts as image files in a folder beside it.")
@click.option("--images", "image_format", type=click.Choice(["svg", "png"]), default="svg", show_default=True,
              help="md: the charts' image format.")
@handle_errors
def report_cmd(source: Path, output: Path | None, fmt: str, image_format: str) -> None:
    """Write one page people look at: the charts and tables of SOURCE.

    \b
    SOURCE: a capture (run directory, xprof log directory, .xplane.pb, opstats.json), a diagnosis
    JSON, a memory JSON ('memory --format json'), a 'verify --out' folder, a 'doctor --out' folder,
    or a gate JSON verdict. The page is one file that works offline and from file:// (light and
    dark, printable, sortable tables); every charted figure is also in a table. The charts are drawn by the 'report' extra (vl-convert-python);
    without it the page holds every table and says, in each chart's place, what draws it.

    \b
    Exit codes: 0 written, 2 bad input, 3 internal error.
    """
    start_numpy_reading()  # this process only reads: numpy with one BLAS thread
    from hlo_doctor.render.html import available, to_html
    from hlo_doctor.render.html.markdown import to_markdown
    from hlo_doctor.render.html.vega import unavailable_reason

    charts = available()
    t0 = time.perf_counter()
    page = build_page(source)
    t1 = time.perf_counter()
    out = output or Path(f"report.{fmt}")
    if fmt == "html":
        write_output(to_html(page, charts=charts), out)
    else:
        image_dir = f"{out.stem}-charts"
        text, images = to_markdown(page, image_dir=image_dir, image_format=image_format, charts=charts)
        folder = _charts_folder(out.parent / image_dir) if images else None
        for name, data in images.items():
            # Atomic, like every output: a link planted at a chart's name is replaced, never followed.
            # The folder is opened without following a link: one planted there after the check is refused.
            write_file_atomically(folder / name, data, folder_no_link=True)  # type: ignore[operator]
        write_output(text, out)
        if images:
            console.print(f"wrote {len(images)} chart image(s) to {out.parent / image_dir}", soft_wrap=True,
                          markup=False)
    for line in page.missing:
        console.print(f"not drawn: {line}", soft_wrap=True, markup=False)
    if page.charts and not charts:
        console.print(f"charts not drawn (tables only): {unavailable_reason()}", soft_wrap=True, markup=False)
    console.print(f"{page.kind} page: {len(page.charts)} chart(s), {len(page.tables)} table(s); "
                  f"read {t1 - t0:.1f} s, written {time.perf_counter() - t1:.1f} s", soft_wrap=True, markup=False)


COMMANDS = [report_cmd]
