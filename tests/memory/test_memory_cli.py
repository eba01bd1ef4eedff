"""``hlo-doctor memory RUN``: every format on a real capture, and bad input (a trace JSON, a damaged
buffer assignment) said in one line, never exit 3."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.memory import memory_from_protos, read_memory
from hlo_doctor.memory.proto import _messages
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.read import read_module_protos

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
RUN = SAMPLES / "engine_b64_original_a"


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["memory", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_lists_the_steps_programs_first_with_the_seeds_f32_twin() -> None:
    code, out, _ = _invoke(str(RUN), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "hlo-doctor.memory/1"
    ran = [p for p in doc["programs"] if p["runs_per_step"]]
    assert {p["module"] for p in ran} == {"jit_compute_logits", "jit_decode_forward", "jit_sample",
                                          "jit_convert_element_type"}
    assert doc["programs"][: len(ran)] == ran
    sample = next(p for p in ran if p["module"] == "jit_sample")
    # the greedy branch returns its f32 input: the argument and its copy are both live at the peak
    kinds = {(b["opcode"], b["category"], b["shape"].split("{")[0]) for b in sample["buffers_at_peak"]}
    assert ("parameter", "argument", "f32[64,256000]") in kinds and ("copy", "output", "f32[64,256000]") in kinds
    assert sample["heap"] and len(sample["heap"]) == len(sample["heap_instructions"])


def test_table_markdown_and_csv_agree_on_the_peaks() -> None:
    report = read_memory(RUN)
    code, out, err = _invoke(str(RUN))
    assert code == 0 and out == "" and "jit_compute_logits(62)" in err and "live at the peak" in err
    code, md, _ = _invoke(str(RUN), "--format", "md")
    assert code == 0 and md.startswith("# memory: ") and "| jit_sample(124) | 1 |" in md
    code, text, _ = _invoke(str(RUN), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(report.programs)
    assert {(r["module"], int(r["program_id"]), int(r["peak_bytes"])) for r in rows} == {
        (p.module, p.program_id, p.peak_bytes) for p in report.programs}


def test_a_trace_json_says_it_holds_no_buffer_assignments(tmp_path: Path) -> None:
    trace = next((SAMPLES / "gpu_h200_seed_b512").rglob("*.trace.json.gz"))
    code, out, err = _invoke(str(trace))
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds no buffer assignments" in lines[0]


def test_a_damaged_buffer_assignment_is_named_with_its_program() -> None:
    protos = read_module_protos(find_xplanes(RUN)[0])
    target = next(p for p in protos if p.name == "jit_sample" and p.program_id == 124)
    msg = _messages()[0].FromString(target.hlo_proto)
    del msg.buffer_assignment.logical_buffers[0]  # an allocation now holds a buffer nobody defines
    damaged = replace(target, hlo_proto=msg.SerializeToString())
    report = memory_from_protos([damaged, *[p for p in protos if p is not target]], origin="damaged")
    bad = report.program("jit_sample", 124)
    assert bad is not None and bad.error and bad.peak_bytes == 0
    assert any(w.startswith("jit_sample(124): buffer assignment not read") for w in report.warnings)
    good = report.program("jit_compute_logits", 62)
    assert good is not None and good.peak_bytes > 0 and not good.error


def test_stats_memory_section_is_the_memory_commands_report() -> None:
    gpu = SAMPLES / "gpu_h200_original"
    result = CliRunner().invoke(main, ["stats", str(gpu), "--memory", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    ran = {(p["module"], p["peak_bytes"]) for p in doc["programs"] if p["runs_per_step"]}
    assert ran == {(p.module, p.peak_bytes) for p in read_memory(gpu, runs=None).programs
                   if (p.module, p.program_id) in {(q["module"], q["program_id"]) for q in doc["programs"]
                                                   if q["runs_per_step"]}}
    assert doc["device_kind"] == "NVIDIA H200" and doc["kv_cache"]["bytes_per_token"] == 512


def test_diagnose_names_time_and_memory_in_one_finding_per_waste() -> None:
    from hlo_doctor.lint import diagnose, load_context, load_rulebook

    diagnosis = diagnose(load_context(RUN), load_rulebook(()), select=("HD002", "HD003", "HD017"))
    codes = {(f.code, f.module, f.op) for f in diagnosis.findings}
    assert codes == {("HD002", "jit_sample", "copy"), ("HD003", "jit_convert_element_type", "wrapped_convert")}
    copy = next(f for f in diagnosis.findings if f.code == "HD002")
    extra = dict(copy.extra)
    # the returned f32 logits and the tuple slot that goes with them
    assert extra["freed_bytes"] == 64 * 256000 * 4 + 16 and extra["memory_codes"] == ("HD017",)
    assert copy.time_per_step_us and "Memory (HD017)" in copy.message
    convert = dict(next(f for f in diagnosis.findings if f.code == "HD003").extra)
    assert dict(convert["freed_bytes_by_program"]) == {"jit_convert_element_type": 64 * 256000 * 4,
                                                       "jit_sample": 64 * 256000 * 2}


def test_the_step_view_describes_only_the_steps_programs_with_the_same_figures() -> None:
    from hlo_doctor.cli.memory import _steps_beside

    runs = _steps_beside(RUN)
    whole, step = read_memory(RUN, runs=runs), read_memory(RUN, runs=runs, describe="step")
    assert [p.to_dict(heap=True) for p in step.step_programs] == [p.to_dict(heap=True) for p in whole.step_programs]
    rest = [p for p in step.programs if not p.runs_per_step]
    assert rest and all(p.peak_bytes == whole.program(p.module, p.program_id).peak_bytes  # type: ignore[union-attr]
                        for p in rest)
    assert all(not b.shape for p in rest for b in p.buffers_at_peak)  # not parsed: names only
    code, out, _ = _invoke(str(RUN), "--format", "md", "--buffers", "3")
    from hlo_doctor.render.memory import to_markdown

    assert code == 0 and out == to_markdown(replace(whole, origin=str(RUN)), buffers=3)


def test_one_program_read_alone_and_a_name_that_is_not_there() -> None:
    code, out, _ = _invoke(str(RUN), "--program", "jit_decode_forward(46)", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    whole = read_memory(RUN).program("jit_decode_forward", 46)
    assert [p["module"] for p in doc["programs"]] == ["jit_decode_forward"]
    assert whole is not None and doc["programs"][0]["peak_bytes"] == whole.peak_bytes
    code, _, err = _invoke(str(RUN), "--program", "jit_nothing")
    assert code == 2 and "no program named jit_nothing" in err and "Traceback" not in err
