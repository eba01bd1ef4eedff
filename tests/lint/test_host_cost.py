"""The host time a removed program's call costs, read from real captures and checked against the
trace's own spans: the H200 decode step (``sample_traces/gpu_h200_original``) and a small XLA:CPU
program with an eager ``astype`` before a jitted call, profiled here with ``hlo-doctor profile``.

The spans are summed here by walking the xplane protobuf directly (the Python tracer's frames and
jax's ``PjitFunction`` spans on the thread that holds the ``decode`` step annotations), not through
hlo-doctor's readers.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.model import Finding
from hlo_doctor.lint import Context, diagnose, load_context, load_rulebook, total_recoverable
from hlo_doctor.lint.host_cost import call_cost, held_by_removed_programs
from hlo_doctor.lint.runtime_gaps import runtime_gaps
from hlo_doctor.trace import xplane_pb2 as xp

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
H200 = SAMPLES / "gpu_h200_original"
CONVERT = "jit_convert_element_type"
BOOK = load_rulebook()

_PROGRAM = '''\
import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (16, 8192), jnp.bfloat16)


@jax.jit
def pick(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    logits = _LOGITS.astype(jnp.float32)
    return pick(logits)
'''


def _driver_line(path: Path) -> tuple[list[tuple[float, float, str]], list[tuple[float, float]]]:
    """(start, end, name) in us of every event on the host line that holds the step annotations,
    and the steps' spans."""
    space = xp.XSpace()  # type: ignore[attr-defined]
    space.ParseFromString(next(path.rglob("*.xplane.pb")).read_bytes())
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            events, steps = [], []
            for ev in line.events:
                start = (line.timestamp_ns * 1000 + ev.offset_ps) / 1e6
                end = start + ev.duration_ps / 1e6
                events.append((start, end, plane.event_metadata[ev.metadata_id].name))
                if any(stat_names.get(s.metadata_id) == "step_num" for s in ev.stats):
                    steps.append((start, end))
            if steps:
                return events, steps
    raise AssertionError(f"{path}: no step annotations")


def _in_steps(t: float, steps: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in steps)


def _astype_calls(path: Path) -> tuple[list[float], list[float], list[float]]:
    """Durations (us) of the ``_astype`` frames that dispatch the convert program, of those
    programs' outermost ``PjitFunction(convert_element_type)`` spans, and of the ``_astype`` frames
    that dispatch nothing (a convert to the dtype the array has), inside the steps."""
    events, steps = _driver_line(path)
    dispatches = [(a, b) for a, b, n in events if n == "PjitFunction(convert_element_type)"]
    outer = [(a, b) for a, b in dispatches if not any(c < a and b <= d or c <= a and b < d for c, d in dispatches)]
    calls, empty = [], []
    for a, b, name in events:
        if not re.fullmatch(r"\$array_methods\.py:\d+ _astype", name) or not _in_steps(a, steps):
            continue
        if any(a <= c and d <= b for c, d in outer):
            calls.append(b - a)
        else:
            empty.append(b - a)
    return calls, [b - a for a, b in outer if _in_steps(a, steps)], empty


@pytest.fixture(scope="module")
def h200() -> Context:
    return load_context(H200)


def _one(findings: tuple[Finding, ...] | list[Finding], code: str, where: str = "") -> Finding:
    (f,) = [f for f in findings if f.code == code and where in f.message]
    return f


def test_h200_call_is_the_eager_astype_frame_around_its_dispatch(h200: Context) -> None:
    cost = call_cost(h200, CONVERT)
    assert cost is not None
    calls, dispatches, empty = _astype_calls(H200)
    # One eager astype per decode step issues the program; the runner's second astype (the logits are
    # already f32) dispatches nothing and is not the program's call.
    assert cost.calls == len(calls) == len(dispatches) == 5 and len(empty) == 5
    # That second astype goes with the fix (left alone it would become the widening): its frames
    # are the call's repeats, counted apart from the call.
    assert cost.repeats == 5 and cost.repeat_host_us == pytest.approx(sum(empty), abs=0.01)
    assert cost.host_us == pytest.approx(sum(calls), abs=0.01)
    assert cost.dispatch_us == pytest.approx(sum(dispatches), abs=0.01)
    assert cost.per_step(cost.dispatch_us) == pytest.approx(67.2, abs=0.1)  # what HD003 counted before
    assert cost.per_step(cost.host_us) == pytest.approx(190.0, abs=0.1)
    assert cost.frames == ("array_methods.py:116 _astype",)
    assert cost.callers == ("runner.py:135 _sample_from_logits",)


def test_h200_hd003_counts_the_idle_time_of_the_call_and_the_device_time_waited_for(h200: Context) -> None:
    cost = call_cost(h200, CONVERT)
    assert cost is not None
    # The device idles through most of the call (the step is host-bound); the convert's own kernel
    # runs while the call's Python is still on the host.
    assert 0 < cost.idle_us < cost.host_us
    assert cost.device_us == pytest.approx(5 * 23.39, abs=0.1)
    assert 0 < cost.device_waited_us <= cost.device_us
    f = _one(diagnose(h200, BOOK).findings, "HD003")
    assert f.recoverable_us == pytest.approx(cost.recoverable_us)
    assert f.recoverable_us == pytest.approx((cost.idle_us + cost.repeat_idle_us + cost.device_waited_us) / 5)
    # The device idles through most of the repeats too (its last kernels end early in them).
    assert 0 < cost.repeat_idle_us <= cost.repeat_host_us
    assert 200 < f.recoverable_us < 220  # the dispatch alone: 67.2 us; without the repeats 178.1 us
    assert dict(f.extra)["host_calls"] == ("array_methods.py:116 _astype",)


def test_h200_hd015_leaves_the_call_to_hd003_and_the_summary_counts_it_once(h200: Context) -> None:
    result = diagnose(h200, BOOK)
    hd003 = _one(result.findings, "HD003")
    sample = _one(result.findings, "HD015", "_sample_from_logits")
    (held,) = held_by_removed_programs(h200)
    assert (held.module, held.where) == (CONVERT, "runner.py:135 _sample_from_logits")
    extra = dict(sample.extra)
    assert extra["held_by"] == (("HD003", CONVERT, round(held.python_us, 1)),)
    assert sample.recoverable_us == pytest.approx(extra["python_idle_us"] - held.python_us)
    # HD003's idle time inside the call, split as the step breakdown labels it, is the held Python
    # plus the call's dispatch.
    cost = call_cost(h200, CONVERT)
    assert cost is not None
    assert held.python_us + held.dispatch_us == pytest.approx(cost.per_step(cost.idle_us + cost.repeat_idle_us), abs=0.01)
    assert result.recoverable_us == pytest.approx(sum(f.recoverable_us or 0.0 for f in result.findings))
    # Without HD003 the held Python goes back to HD015's line in the summary: counted once either way.
    without = diagnose(h200, BOOK, ignore=["HD003"])
    assert without.recoverable_us == pytest.approx(
        result.recoverable_us - (hd003.recoverable_us or 0.0) + round(held.python_us, 1), abs=0.01)


def test_summary_names_the_step_it_divides_by(h200: Context) -> None:
    line = diagnose(h200, BOOK).summary_line()
    assert line.endswith("(~37%; step: mean of 5 traced step annotations) is recoverable"), line
    # An opstats.json export says nothing of its steps: the line is as before.
    seed = diagnose(load_context(SAMPLES / "seed_v5e_b512"), BOOK)
    assert seed.step_basis == "" and "step:" not in seed.summary_line()


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eager_astype")
    (folder / "eager_astype.py").write_text(textwrap.dedent(_PROGRAM))
    out = folder / "run"
    result = CliRunner().invoke(main, ["profile", f"{folder / 'eager_astype.py'}:step", "--steps", "5",
                                       "--warmup", "2", "--out", str(out), "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def test_xla_cpu_eager_astype_before_a_jitted_call(cpu_run: Path) -> None:
    ctx = load_context(cpu_run)
    cost = call_cost(ctx, CONVERT)
    assert cost is not None
    calls, dispatches, _ = _astype_calls(cpu_run)
    assert cost.calls == len(calls) == len(dispatches) == 5
    assert cost.host_us == pytest.approx(sum(calls), abs=0.01)
    assert cost.dispatch_us == pytest.approx(sum(dispatches), abs=0.01)
    assert cost.python_us > 0  # the Python tracer's frames of the astype around its dispatch
    assert [f.split(" ")[1] for f in cost.frames] == ["_astype"]
    line = _PROGRAM.splitlines().index("def step():") + 1
    assert cost.callers == (f"eager_astype.py:{line} step",)
    result = diagnose(ctx, BOOK)
    hd003 = _one(result.findings, "HD003")
    # XLA:CPU: with the runtime's idle before and after the program while the host waited (judged
    # against xprof's events in tests/lint/test_runtime_gaps.py).
    gaps = runtime_gaps(ctx, CONVERT)
    assert gaps is not None and gaps.steps == 5
    assert hd003.recoverable_us == pytest.approx(cost.recoverable_us + gaps.recoverable_us)
    assert cost.repeats == 0  # one astype per step, converting
    assert cost.recoverable_us == pytest.approx((cost.idle_us + cost.device_waited_us) / cost.steps)
    assert cost.device_waited_us <= cost.device_us + 1e-6 and cost.idle_us <= cost.host_us + 1e-6
    # Each interval of host time has one owner: whatever HD015 says of this line leaves the call out.
    assert result.recoverable_us == pytest.approx(total_recoverable(result.findings))
    for f in result.findings:
        if f.code == "HD015" and dict(f.extra).get("held_by"):
            assert (f.recoverable_us or 0.0) <= dict(f.extra)["python_idle_us"] - dict(f.extra)["held_by"][0][2] + 0.1


def test_inputs_without_a_driver_thread_fall_back() -> None:
    ctx = load_context(SAMPLES / "seed_v5e_b512")  # an opstats.json export: no host events
    assert call_cost(ctx, CONVERT) is None
    f = _one(diagnose(ctx, BOOK).findings, "HD003")
    assert f.recoverable_us == pytest.approx(f.time_per_step_us)


_TWIN_LEFT = '''\
import jax


@jax.jit
def scale(x):
    return x * 2
'''

_TWIN_RIGHT = '''\
import jax.numpy as jnp


def widen(logits):
    wide = logits.astype(jnp.float32)
    return wide
'''

_TWIN_PROGRAM = '''\
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp


def _load(folder):
    spec = importlib.util.spec_from_file_location(f"{folder}_helpers", Path(__file__).parent / folder / "helpers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


left, right = _load("left"), _load("right")
_LOGITS = jax.random.normal(jax.random.key(0), (12, 6144), jnp.bfloat16)  # a shape no other test converts


@jax.jit
def pick(logits):
    return jnp.argmax(logits, axis=-1)


def step():
    return pick(left.scale(right.widen(_LOGITS)))
'''


def test_a_frame_is_placed_in_the_one_file_of_its_base_name_that_defines_it_there(tmp_path: Path) -> None:
    """Two helpers.py files both traced (``left/`` a jitted scale, ``right/`` the eager astype): the
    Python tracer names a frame by base name only (``$helpers.py:4 widen``). Sorted by path, the left
    file came first and HD003 pointed into it, at a blank line; the file in which ``widen`` starts
    at line 4 is the right one, and the line a person edits there is the astype."""
    for folder, text in (("left", _TWIN_LEFT), ("right", _TWIN_RIGHT)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "helpers.py").write_text(text)
    (tmp_path / "prog.py").write_text(_TWIN_PROGRAM)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["profile", f"{tmp_path / 'prog.py'}:step", "--steps", "4", "--warmup", "1",
                                       "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    astype = _TWIN_RIGHT.splitlines().index("    wide = logits.astype(jnp.float32)") + 1
    ctx = load_context(out)
    hd003 = _one(diagnose(ctx, BOOK).findings, "HD003")
    assert hd003.source == f"{tmp_path / 'right' / 'helpers.py'}:{astype}", hd003.source
    assert "left/helpers.py" not in hd003.message
    # The step breakdown's host lines name the same file for the frame.
    breakdown = CliRunner().invoke(main, ["stats", str(out), "--breakdown", "--format", "json"])
    assert breakdown.exit_code == 0, breakdown.output
    lines = json.loads(breakdown.stdout[breakdown.stdout.index("{"):])["lines"]
    widen = [ln for ln in lines if ln["where"] == "helpers.py:4 widen"]
    assert widen and {ln["path"] for ln in widen} == {str(tmp_path / "right" / "helpers.py")}


def test_idle_by_line_cut_a_span_at_a_time_is_the_whole_threads(h200: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle time by source line, its pieces cut a block of spans at a time (down to one span and
    one segment a block), is the whole thread's cut's, float for float."""
    from hlo_doctor.lint import host_cost

    whole = host_cost._call_cost.__wrapped__(h200, CONVERT)
    monkeypatch.setattr(host_cost, "_PIECES_AT_ONCE", 1)
    blocks = host_cost._call_cost.__wrapped__(h200, CONVERT)
    assert whole is not None and blocks is not None and whole.idle_by_line
    assert blocks.idle_by_line == whole.idle_by_line
