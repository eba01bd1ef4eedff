"""Pricing on XLA:CPU: the runtime's idle next to a removed program or copy, and the what-if run.

The runtime's idle, judged against xprof's own events.

A real capture (XLA:CPU, the Python tracer on) of a sampler step shaped like the engine's: an eager
``astype`` to float32, then a jitted argmax that also returns its input (XLA copies it into the
output). ``runtime_gaps`` must equal what the same capture's events say once xprof's converter has
written them as trace-viewer JSON: per step, the op-free interval just before the convert program
and just after the copy (the last op of its program), counted while the driver thread is in
``block_until_ready`` or in XLA:CPU's execution of a program (``ExecuteHelper`` under a dispatch),
and not inside the convert's own dispatch.

The what-if run (HD004: the argmax over the narrow dtype, timed here): runs only where asked and
where this machine has the capture's jax and jaxlib; its ratio prices the finding, a slower narrow
read becomes the fix's cost, and the fix's promise is what its findings recover less that cost.
"""

from __future__ import annotations

import gzip
import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))
from test_trace_json import xprof_trace_json  # noqa: E402

from hlo_doctor.cli import main  # noqa: E402
from hlo_doctor.lint import diagnose, load_context, load_rulebook  # noqa: E402
from hlo_doctor.lint.context import Context  # noqa: E402
from hlo_doctor.lint.host_cost import call_cost  # noqa: E402
from hlo_doctor.lint.promise import fix_cost  # noqa: E402
from hlo_doctor.lint.runner import total_recoverable  # noqa: E402
from hlo_doctor.lint.runtime_gaps import runtime_gaps  # noqa: E402
from hlo_doctor.lint.whatif import Refused, narrow_read, refusal  # noqa: E402
from hlo_doctor.trace import find_xplanes  # noqa: E402

_PROGRAM = '''\
import jax
import jax.numpy as jnp

_LOGITS = jax.random.normal(jax.random.key(0), (32, 65536), jnp.bfloat16)


@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1), logits


def step():
    return sample(_LOGITS.astype(jnp.float32))
'''
CONVERT = "jit_convert_element_type"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runtime_gaps")
    (folder / "sampler.py").write_text(textwrap.dedent(_PROGRAM))
    out = folder / "run"
    result = CliRunner().invoke(main, ["profile", f"{folder / 'sampler.py'}:step", "--steps", "5", "--warmup", "2",
                                       "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def ctx(run: Path) -> Context:
    return load_context(run)


def _events(trace: Path) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def _judge(trace: Path, module: str, op: str) -> tuple[float, float]:
    """(before, after) us over all steps, from xprof's trace-viewer events alone."""
    events = _events(trace)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if "step_num" in (e.get("args") or {}))
    ops = sorted((e["ts"], e["ts"] + e["dur"], str(e["args"].get("hlo_module", "")), str(e["args"]["hlo_op"]))
                 for e in events if "hlo_op" in (e.get("args") or {}))
    # The driver thread: the one with the step annotations.
    tid = next(e["tid"] for e in events if "step_num" in (e.get("args") or {}))
    mine = [e for e in events if e["tid"] == tid]
    dispatches = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in mine if str(e["name"]).startswith("PjitFunction(")]
    waits = [(e["ts"], e["ts"] + e["dur"]) for e in mine if str(e["name"]).endswith(" block_until_ready")
             and str(e["name"]).startswith("$")]
    # XLA:CPU runs a program inside its dispatch while the thread waits: ExecuteHelper under a PjitFunction.
    waits += [(e["ts"], e["ts"] + e["dur"]) for e in mine if "ExecuteHelper" in str(e["name"])
              and any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b, _ in dispatches)]
    own = [(a, b) for a, b, n in dispatches if n == "PjitFunction(convert_element_type)"]

    def waited(lo: float, hi: float) -> float:
        cuts = sorted({lo, hi} | {t for a, b in waits + own for t in (a, b) if lo < t < hi})
        return sum(b - a for a, b in zip(cuts, cuts[1:], strict=False)
                   if any(x <= (a + b) / 2 < y for x, y in waits) and not any(x <= (a + b) / 2 < y for x, y in own))

    before = after = 0.0
    for lo, hi in steps:
        inside = [o for o in ops if lo <= o[0] < hi]
        for i, (start, _end, mod, name) in enumerate(inside):
            if mod != module or (op and name != op):
                continue
            reach_before = max((o[1] for o in inside[:i]), default=lo)
            reach = max(o[1] for o in inside[: i + 1])
            nxt = inside[i + 1][0] if i + 1 < len(inside) else hi
            # Its program's run opens with it (another program's op, or none, before it) and closes
            # with it (another program's op, or the step's end, after it).
            first = not i or inside[i - 1][2] != module
            last = i + 1 == len(inside) or inside[i + 1][2] != module
            if first and start > reach_before:
                before += waited(reach_before, start)
            if last and nxt > reach:
                after += waited(reach, nxt)
    return before, after


@pytest.mark.parametrize(("module", "op"), [(CONVERT, ""), ("jit_sample", "copy")])
def test_gaps_are_what_xprofs_events_say(run: Path, ctx: Context, tmp_path: Path, module: str, op: str) -> None:
    gaps = runtime_gaps(ctx, module, op)
    assert gaps is not None and gaps.steps == 5 and gaps.runs == 5
    before, after = _judge(xprof_trace_json(find_xplanes(run)[0], tmp_path), module, op)
    # xprof writes microseconds with three decimals.
    assert gaps.before_us == pytest.approx(before, abs=0.01 * gaps.runs)
    assert gaps.after_us == pytest.approx(after, abs=0.01 * gaps.runs)
    if op:  # the copy ends its program: the step ends after it, the host waiting for it
        assert gaps.before_us == 0.0 and gaps.after_us > 0.0


def test_the_findings_count_them(ctx: Context) -> None:
    result = diagnose(ctx, load_rulebook())
    (hd003,) = [f for f in result.findings if f.code == "HD003"]
    (hd002,) = [f for f in result.findings if f.code == "HD002"]
    cost = call_cost(ctx, CONVERT)
    convert, copy = runtime_gaps(ctx, CONVERT), runtime_gaps(ctx, "jit_sample", "copy")
    assert cost is not None and convert is not None and copy is not None
    assert hd003.recoverable_us == pytest.approx(cost.recoverable_us + convert.recoverable_us)
    assert dict(hd003.extra)["runtime_gap_before_us_per_step"] == round(convert.per_step(convert.before_us), 1)
    timing = ctx.op_timing("jit_sample", "copy")
    assert timing is not None
    assert hd002.recoverable_us == pytest.approx(timing.time_per_step_us + copy.recoverable_us)


def test_only_on_xla_cpu(ctx: Context) -> None:
    # The same capture said to be a GPU's: the idle around a launch is the host's, counted elsewhere.
    assert runtime_gaps(replace(ctx, backend="gpu"), CONVERT) is None
    assert runtime_gaps(ctx, "jit_no_such_program") is None


def test_what_if_runs_only_where_asked_and_where_it_stands_for_the_capture(ctx: Context) -> None:
    import jax

    assert dict(ctx.versions)["jax_version"] == jax.__version__  # the capture names what ran it
    assert refusal(ctx) == "what-if runs are off"
    asked = replace(ctx, what_if=True)
    assert refusal(asked) == ""
    assert "not XLA:CPU" in refusal(replace(asked, backend="tpu"))
    older = refusal(replace(asked, versions=(("jax_version", "0.4.1"), ("jaxlib_version", "0.4.1"))))
    assert "0.4.1" in older and jax.__version__ in older
    assert refusal(replace(asked, versions=())) == "the capture names no jax version"
    # What it cannot build it does not guess: it says why, in one line.
    for refused in (narrow_read("top-k", (4, 64), (1,), "f32", "bf16"),
                    narrow_read("argmax", (4, 64, 8), (1, 2), "f32", "bf16"),
                    narrow_read("argmax", (1 << 16, 1 << 16), (1,), "f32", "bf16")):
        assert isinstance(refused, Refused) and refused.reason and "\n" not in refused.reason


def test_hd004_is_priced_by_the_what_if_and_the_fix_promise_nets_its_cost(ctx: Context) -> None:
    book = load_rulebook()
    (plain,) = [f for f in diagnose(ctx, book).findings if f.code == "HD004"]
    assert plain.recoverable_us is None and dict(plain.extra)["estimate"] == "not priced"
    result = diagnose(replace(ctx, what_if=True), book)
    (hd004,) = [f for f in result.findings if f.code == "HD004"]
    extra = dict(hd004.extra)
    ratio = extra["what_if_ratio"]
    timing = ctx.op_timing(hd004.module, hd004.op)
    assert timing is not None and ratio > 0 and extra["measured"] in extra["what_if"]
    assert extra["measured"].startswith("measured here ") and f"{extra['measured_reps']} runs each" in extra["measured"]
    if ratio < 1.0:  # the narrow read is faster here: that share of the op's time is recovered
        assert hd004.recoverable_us == pytest.approx(timing.time_per_step_us * (1.0 - ratio), rel=2e-3)
        assert "fix_cost_us" not in extra
    else:  # slower: nothing recovered, the extra time is the fix's cost
        assert hd004.recoverable_us == 0.0
        assert extra["fix_cost_us"] == pytest.approx(timing.time_per_step_us * (ratio - 1.0), rel=2e-3, abs=0.1)
        assert "costs" in hd004.message
    (promise,) = [p for p in result.fixes if p.fix == hd004.fix]
    mine = [f for f in result.findings if f.fix == hd004.fix]
    assert promise.recoverable_us == pytest.approx(total_recoverable(mine))
    assert promise.model_us == pytest.approx(total_recoverable(mine) - fix_cost(mine))
    # The promise is the model's figure unless a replay of the capture's programs measured it here.
    m = promise.replay
    assert promise.net_us == (promise.model_us if m is None else m.promise_us if m.significant else 0.0)
    assert ("fixes" in result.to_dict()) and bool(result.fixes_line())
    assert m is not None or extra["measured"] in result.fixes_line()


def test_the_reports_page_tabulates_each_fixs_promise(ctx: Context) -> None:
    from hlo_doctor.render.html.model import Table
    from hlo_doctor.render.html.ops import ops_section

    doc = diagnose(replace(ctx, what_if=True), load_rulebook()).to_dict()
    tables = [i for i in ops_section(None, doc).items if isinstance(i, Table) and i.id == "table-fixes"]
    priced = [p for p in doc["fixes"] if p["cost_us"] > 0 or p["measured"]]
    # The table is there exactly when a what-if priced the fix, with every figure of the JSON and
    # what was measured here (when, runs, interval).
    assert len(tables) == (1 if priced else 0)
    if tables:
        assert [[c.value for c in r][:5] + [r[6].value, r[7].value] for r in tables[0].rows] == [
            [p["fix"], p["findings"], p["recoverable_us"], p["cost_us"], p["net_us"], p["verdict"],
             "; ".join(p["measured"]) or None] for p in doc["fixes"]]
    plain = [i for i in ops_section(None, diagnose(ctx, load_rulebook()).to_dict()).items
             if isinstance(i, Table) and i.id == "table-fixes"]
    assert plain == []
