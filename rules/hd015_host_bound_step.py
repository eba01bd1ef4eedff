"""HD015: a host-bound step: the device waits while the host runs Python or dispatches programs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from hlo_doctor.lint import Context, Example, Finding, Rule, Severity
from hlo_doctor.lint.host_cost import Held, held_by_removed_programs

HOST_BOUND_PCT = 50.0
"""The step is host-bound from this share (%) of its wall time in which the device runs no op while
the host runs Python or dispatches a program: then the host's work is the longer part of the step,
it sets the step time, and no change to the device's ops can recover more than the other part. Below
it, idle time between programs is the usual cost of launching them (a 0.3 ms XLA:CPU step spends
~17% of it in dispatch; the reference engine at its test size ~30%) and the op rules say more.
xprof's input-pipeline analysis flags 15% of such "all other" time as highly bound: a hint to look,
where this rule states that the host bounds the step."""
LINE_FLOOR_PCT = 1.0
"""A source line is named from this share (%) of the step in device idle time it fills."""
MAX_FINDINGS = 5
_HOST = ("python", "dispatch")


def _step(step: int, start: float, wall: float, busy: float, host: dict[str, float], idle: dict[str, float],
          device: tuple[str, str]) -> dict[str, Any]:
    return {"host": device[0], "device": device[1], "step": step, "start_us": start, "wall_us": wall,
            "busy_us": busy, "op_us": busy, "host_us": host, "idle_by_kind": idle}


def _line(kind: str, where: str, target: str, idle: float, host: float, path: str) -> dict[str, Any]:
    return {"kind": kind, "where": where, "target": target, "idle_us": idle, "host_us": host, "path": path}


def _breakdown(steps: Sequence[dict[str, Any]], lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"step_source": "annotation", "python_frames": True, "dispatch_spans": True,
            "steps": list(steps), "lines": list(lines)}


_GPU, _CPU = ("vm", "/device:GPU:0"), ("vm", "/host:CPU")
_RUNNER = "hlo_doctor/engine/runner.py"
# Cut from `hlo-doctor stats RUN --breakdown json` (times rounded to 0.1 us, top lines only).
# sample_traces/gpu_h200_original: the reference engine on an H200, 5 decode steps.
_H200 = _breakdown(steps=(
    _step(0, 17094.7, 3444.7, 176.0, {"python": 1479.1, "dispatch": 1540.9, "wait": 417.8, "untraced": 7.0},
          {"python": 1458.0, "dispatch": 1386.0, "wait": 417.8, "untraced": 7.0}, _GPU),
    _step(1, 20578.8, 1602.7, 178.5, {"python": 452.8, "dispatch": 1014.4, "wait": 131.7, "untraced": 3.8},
          {"python": 408.7, "dispatch": 879.9, "wait": 131.7, "untraced": 3.8}, _GPU),
    _step(2, 22207.0, 1648.1, 178.0, {"python": 447.0, "dispatch": 1184.2, "wait": 13.8, "untraced": 3.0},
          {"python": 417.6, "dispatch": 1035.7, "wait": 13.8, "untraced": 3.0}, _GPU),
    _step(3, 23876.6, 1487.4, 178.0, {"python": 405.1, "dispatch": 1064.4, "wait": 15.2, "untraced": 2.7},
          {"python": 373.1, "dispatch": 918.4, "wait": 15.2, "untraced": 2.7}, _GPU),
    _step(4, 25383.4, 1238.1, 178.7, {"python": 422.5, "dispatch": 799.5, "wait": 13.3, "untraced": 2.8},
          {"python": 398.7, "dispatch": 644.6, "wait": 13.3, "untraced": 2.8}, _GPU),
), lines=(
    _line("dispatch", "runner.py:124 execute_decode", "jit_decode_forward", 787.9, 847.4, _RUNNER),
    _line("python", "runner.py:124 execute_decode", "api.py:2307 device_put", 415.9, 415.9, _RUNNER),
    _line("python", "runner.py:135 _sample_from_logits", "array_methods.py:116 _astype", 138.0, 160.5, _RUNNER),
    _line("wait", "", "api.py:2757 block_until_ready", 118.4, 118.4, ""),
    _line("dispatch", "runner.py:124 execute_decode", "jit_compute_logits", 81.9, 106.4, _RUNNER),
    _line("dispatch", "runner.py:135 _sample_from_logits", "jit_sample", 54.4, 99.6, _RUNNER),
    _line("dispatch", "runner.py:135 _sample_from_logits", "jit_convert_element_type", 48.7, 67.2, _RUNNER),
    _line("python", "runner.py:124 execute_decode", "", 30.1, 32.4, _RUNNER),
))
# `hlo-doctor profile tests/rules/programs/host_bound_step.py:step --steps 5 --warmup 2` on XLA:CPU.
_PROGRAM = "tests/rules/programs/host_bound_step.py"
_CPU_PYTHON = _breakdown(steps=(
    _step(0, 53.3, 24021.0, 380.7, {"python": 23319.4, "dispatch": 190.9, "wait": 504.7, "untraced": 6.0},
          {"python": 23309.5, "dispatch": 188.0, "wait": 136.8, "untraced": 6.0}, _CPU),
    _step(1, 24089.3, 27501.5, 284.9, {"python": 27061.8, "dispatch": 69.2, "wait": 367.8, "untraced": 2.6},
          {"python": 27041.1, "dispatch": 66.9, "wait": 106.0, "untraced": 2.6}, _CPU),
    _step(2, 51603.3, 23867.8, 386.9, {"python": 14736.3, "dispatch": 59.9, "wait": 9067.9, "untraced": 3.8},
          {"python": 14736.3, "dispatch": 59.9, "wait": 8681.0, "untraced": 3.8}, _CPU),
    _step(3, 75503.6, 23998.9, 330.3, {"python": 15023.8, "dispatch": 77.8, "wait": 8893.5, "untraced": 3.8},
          {"python": 15023.8, "dispatch": 77.8, "wait": 8563.2, "untraced": 3.8}, _CPU),
    _step(4, 99520.8, 27974.4, 322.6, {"python": 19312.9, "dispatch": 141.3, "wait": 8515.6, "untraced": 4.6},
          {"python": 19312.9, "dispatch": 141.3, "wait": 8193.0, "untraced": 4.6}, _CPU),
), lines=(
    _line("python", "host_bound_step.py:29 score_rows", "", 17310.3, 17314.1, _PROGRAM),
    _line("wait", "host_bound_step.py:41 step", "jit_head", 5053.2, 5218.6, _PROGRAM),
    _line("python", "host_bound_step.py:41 step", "array_constructors.py:374 asarray", 2528.6, 2528.6, _PROGRAM),
    _line("dispatch", "host_bound_step.py:41 step", "jit_stage", 59.2, 59.2, _PROGRAM),
    _line("wait", "host_bound_step.py:41 step", "jit_embed", 43.3, 204.2, _PROGRAM),
    _line("python", "", "capture.py:237 _call_step", 32.1, 33.7, ""),
))
# sample_traces/engine_b64_original_a: the reference engine on XLA:CPU, 3 steps, device-bound (its
# idle time is XLA:CPU's threads between ops while the host waits in block_until_ready).
_ENGINE_CPU = _breakdown(steps=(
    _step(0, 74.5, 483563.2, 427262.9, {"python": 1021.4, "dispatch": 189.3, "wait": 482341.3, "untraced": 11.2},
          {"python": 1021.4, "dispatch": 189.3, "wait": 55078.4, "untraced": 11.2}, _CPU),
    _step(1, 483725.4, 436235.6, 322714.4, {"python": 801.9, "dispatch": 174.5, "wait": 435249.5, "untraced": 9.7},
          {"python": 801.9, "dispatch": 174.5, "wait": 112535.1, "untraced": 9.7}, _CPU),
    _step(2, 920067.0, 331910.7, 290101.6, {"python": 767.5, "dispatch": 171.8, "wait": 330961.9, "untraced": 9.5},
          {"python": 767.5, "dispatch": 171.8, "wait": 40860.3, "untraced": 9.5}, _CPU),
), lines=(
    _line("wait", "", "api.py:2479 block_until_ready", 69358.3, 416051.2, ""),
    _line("python", "runner.py:124 execute_decode", "api.py:2035 device_put", 532.6, 532.6, _RUNNER),
    _line("python", "runner.py:135 _sample_from_logits", "array_methods.py:116 _astype", 216.5, 216.5, _RUNNER),
    _line("dispatch", "runner.py:124 execute_decode", "jit_decode_forward", 109.4, 109.4, _RUNNER),
))


def _us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} us"


class HostBoundStep(Rule):
    """A host-bound step: the device waits while the host runs Python or dispatches programs.

    What it flags:
        Steps in which the device runs no op for at least half of the wall time while the host's
        driver thread runs Python or jax's dispatch (the step breakdown of ``stats --breakdown``).
        One finding per source line that fills at least 1% of the step with device
        idle time (at most five, most first): the first frame outside the frameworks (the Python
        tracer names a function by the line it starts at), with what it did meanwhile (the programs
        it dispatched, the framework calls it made) and the idle time each explains per step. Time
        in which no frame of one's own is open (the profiler's harness) names no line.
    Why it costs:
        The device can only run what the host has launched. While the host runs Python between two
        programs, converts an array eagerly, ``device_put``s a scalar or pays a dispatch per small
        program, the device sits idle: the step is as long as the host's work, and making the
        device's ops faster (what the other rules count) saves little. On an H200 the reference
        engine's decode step is 1.9 ms with 0.18 ms of device work; the rest is host time.
    Example:
        ``runner.py:124 execute_decode`` keeps the H200 waiting 1.32 ms per step: the dispatch of
        ``jit_decode_forward`` (0.79 ms), ``jax.device_put(np.int32(position))`` (0.42 ms);
        ``runner.py:135 _sample_from_logits`` 0.24 ms with its eager ``astype``.
    Fix:
        Move the Python off the per-step path: compute it once, or inside the jitted program; keep
        per-step values on the device (no ``device_put`` of a Python scalar, no ``np.asarray`` of a
        device array mid-step); put the eager ops and the small programs of a step into one jitted
        function (one dispatch instead of several); and let the host run ahead (block only on what
        the next step needs). The recoverable time counts the Python a fix moves out of the step;
        a dispatch that must remain is left out of it, and so is the call of a standalone program
        HD003 reports (an eager astype's frames: HD003 counts them, once).
    """

    code = "HD015"
    name = "step.host-bound"
    severity = Severity.HIGH
    requires = ("opstats",)
    fix = ""

    VALID = (
        Example(breakdown=_ENGINE_CPU, step_time_us=417236.5, num_steps=3,
                note="the reference engine on XLA:CPU: device-bound (sample_traces/engine_b64_original_a)"),
        Example(step_time_us=1000.0, num_steps=3, note="no step breakdown (an HLO-only or older input)"),
    )
    INVALID = (
        Example(breakdown=_H200, step_time_us=1884.2, num_steps=5, expect=("HD015 @",),
                note="the reference engine on an H200: 0.18 ms of device work in a 1.9 ms step "
                     "(sample_traces/gpu_h200_original)"),
        Example(breakdown=_CPU_PYTHON, step_time_us=25472.7, num_steps=5, expect=("HD015 @",),
                note="Python between two small jitted programs on XLA:CPU "
                     "(tests/rules/programs/host_bound_step.py:step, profiled)"),
    )

    def check(self, ctx: Context) -> Iterator[Finding]:
        b = ctx.breakdown
        if b is None or not b.slice_count or b.wall_us <= 0:
            return
        wall = b.wall_us
        idle = b.idle_by_kind()
        host_pct = 100.0 * sum(idle[k] for k in _HOST) / wall
        if host_pct < HOST_BOUND_PCT:
            return
        groups: dict[str, list[Any]] = {}
        for line in b.lines:
            # Time in which no frame of one's own is open (the profiler's harness, a framework's own
            # loop) names no line to change.
            if line.kind in _HOST and line.where:
                groups.setdefault(line.where, []).append(line)
        ranked = sorted(groups.items(), key=lambda kv: (-sum(x.idle_us for x in kv[1]), kv[0]))
        held: dict[str, list[Held]] | None = None
        for where, lines in ranked[:MAX_FINDINGS]:
            explained = sum(x.idle_us for x in lines)
            if 100.0 * explained / wall < LINE_FLOOR_PCT:
                break
            if held is None:
                # The calls of the standalone programs HD003 flags are HD003's host time (one owner per
                # interval): read from the trace once, only for a step that is host-bound.
                held = {}
                for h in held_by_removed_programs(ctx):
                    held.setdefault(h.where, []).append(h)
            yield self._finding(b, where, lines, explained, wall, host_pct, held.get(where, []))

    def _finding(self, b: Any, where: str, lines: list[Any], explained: float, wall: float,
                 host_pct: float, held: list[Held]) -> Finding:
        lines = sorted(lines, key=lambda x: -x.idle_us)
        parts = [(f"dispatch of {x.target}" if x.kind == "dispatch" else
                  f"Python in {x.target}" if x.target else "its own Python") + f" {_us(x.idle_us)}"
                 for x in lines if x.idle_us >= 0.5]
        pct = 100.0 * explained / wall
        message = (f"{where} keeps the device waiting {_us(explained)} per step ({pct:.0f}% of the "
                   f"{_us(wall)} step): " + ", ".join(parts[:4]) + ("" if len(parts) <= 4 else ", ...")
                   + f"; the device idles {b.idle_pct:.0f}% of the step, {host_pct:.0f}% while the host "
                     "runs Python or dispatches programs")
        python_us = sum(x.idle_us for x in lines if x.kind == "python")
        # The Python of a removed program's call (an eager astype's frames) is HD003's estimate.
        held_total = sum(h.python_us for h in held)
        held_python = min(held_total, python_us)
        scale = held_python / held_total if held_total > 0 else 0.0
        source = lines[0].source
        file, _, line_no = source.rpartition(":")
        function = where.split(" ", 1)[1] if " " in where else ""
        evidence = tuple(f"{x.kind} {x.target or x.where}: {_us(x.idle_us)} of device idle, {_us(x.host_us)} "
                         "on the host per step" for x in lines)
        if held_python > 0:
            evidence = (*(f"{h.code} counts {_us(h.python_us)} of this Python per step: the calls that issue "
                          f"{h.module}" for h in held), *evidence)
        return Finding(
            code=self.code, name=self.name, severity=self.severity, message=message,
            time_per_step_us=explained, pct_of_step=pct, recoverable_us=(python_us - held_python) or None,
            # Device idle while the host ran this line's Python: host time, all of it.
            parts=(("host", python_us - held_python),) if python_us - held_python else (),
            source=source,
            evidence=evidence[:8],
            extra=(("device_idle_pct", b.idle_pct), ("host_bound_pct", host_pct), ("python_idle_us", python_us),
                   ("dispatch_idle_us", explained - python_us), ("where", where),
                   ("targets", tuple(x.target for x in lines if x.target)),
                   *((("held_by", tuple((h.code, h.module, round(h.python_us * scale, 1)) for h in held)),) if held else ())),
            stack=((file, int(line_no), function),) if line_no.isdigit() else (),
        )
