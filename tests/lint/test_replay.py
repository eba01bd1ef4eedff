"""Replay: a fix's promise measured by compiling a real capture's own HLO protos here, both sides.

Judged by XLA itself: the changed side's compiled module (XLA's own printer) no longer holds the op
the change removes, and its outputs alias the donated parameter; the capture is recorded here with
real JAX. A capture of another jax or backend is refused in one line and keeps its model figure.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from hlo_doctor.capture import capture_callable
from hlo_doctor.cli import main
from hlo_doctor.core.model import Finding
from hlo_doctor.lint import diagnose, load_context, load_rulebook
from hlo_doctor.lint.replay import measure_fix, median_interval, replay_refusal
from hlo_doctor.lint.replay.child import main as child_main
from hlo_doctor.lint.replay.child import opcodes
from hlo_doctor.lint.replay.run import _MEMO, CAP_SECONDS, KIND, NOT_THE_CAPTURE
from hlo_doctor.lint.replay.spec import Call, Parameter, ReplaySpec
from hlo_doctor.lint.replay.timing import decision, look_confidence
from hlo_doctor.lint.runner import replay_unfixed
from hlo_doctor.lint.store import FILE_NAME, MeasurementStore

B, V = 8, 4096


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An eager astype of bf16 logits before a jitted argmax that also returns them (HD003, HD002, HD004)."""

    @jax.jit
    def sample(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.argmax(logits, axis=-1), logits

    x = jax.random.normal(jax.random.key(0), (B, V), jnp.float32).astype(jnp.bfloat16)
    run: Path = capture_callable(lambda: sample(x.astype(jnp.float32)), steps=4, warmup=1,
                                 out_dir=tmp_path_factory.mktemp("replay") / "run", target="test:sample")
    return run


def test_a_real_captures_fix_is_measured_by_replaying_its_programs(capture: Path) -> None:
    ctx = replace(load_context(capture), what_if=True)
    assert replay_refusal(ctx) == ""
    d = diagnose(ctx, load_rulebook())
    promise = next(p for p in d.fixes if p.fix == "bf16-greedy-sampler")
    m = promise.replay
    assert m is not None, promise.unmeasured
    assert promise.basis == "measured" and promise.net_us == (m.promise_us if m.promises else 0.0)
    # Both sides ran, alternated: the convert program is gone from side B, and the sampler's copy
    # of its parameter with it (returned aliased instead).
    assert m.pairs >= 8 and m.a_us > 0 and m.b_us > 0
    assert any(r.startswith("program jit_convert_element_type") for r in m.removed)
    assert any(r.startswith("jit_sample") and " copy " in r for r in m.removed)
    assert m.interval_us[0] <= m.saving_us <= m.interval_us[1]
    assert {"HD002", "HD003"} <= set(m.covered)
    doc = d.to_dict()["fixes"][0]
    assert doc["basis"] == "measured" and doc["replay"]["programs"] == list(m.programs)
    assert "measured by replaying" in d.fixes_line()
    # Pairs were added until the interval decided or the cap was reached, and the figure says which:
    # decided means significant (or within the negligible band), undecided promises nothing.
    assert m.cap_s == CAP_SECONDS and m.stopped in ("saving", "slower", "negligible", "cap")
    # A tiny interval can clear 0 inside the negligible band: significant, yet nothing is promised.
    if m.stopped in ("saving", "slower"):
        assert m.significant and m.promises
    elif m.stopped == "cap":
        assert not m.significant and not m.promises
    else:
        assert not m.promises and promise.net_us == 0.0 and promise.verdict == "no saving expected"
    assert ("undecided at its" in m.line()) == (m.stopped == "cap")
    assert m.when and m.when[:10] in m.line()


def _copy_without_measurements(capture: Path, tmp_path: Path) -> tuple[Path, list[Finding]]:
    """A copy of the capture with no stored measurement, and its HD002/HD003 findings."""
    folder = tmp_path / "run"
    shutil.copytree(capture, folder)
    for stale in folder.glob(FILE_NAME):
        stale.unlink()
    return folder, [f for f in diagnose(replace(load_context(folder), what_if=False), load_rulebook()).findings
                    if f.code in ("HD002", "HD003")]


def test_a_replay_is_stored_with_its_cap_and_reused_as_it_was(capture: Path, tmp_path: Path) -> None:
    folder, findings = _copy_without_measurements(capture, tmp_path)
    store = MeasurementStore(folder)
    # The cap is the context's budget (diagnose's HLO_DOCTOR_MEASURE_SECONDS) where none is given.
    ctx = replace(load_context(folder), what_if=True, measurements=store, measure_seconds=1.0)
    made = measure_fix(ctx, "x", findings, seconds=0.5)
    assert not isinstance(made, str), made
    (rec,) = [r for r in json.loads((folder / FILE_NAME).read_text())["records"] if r["kind"] == KIND]
    assert rec["budget_s"] == 1.0 and rec["stopped"] == made.stopped and rec["reps"] == made.pairs
    # Another process (a fresh store, the memo of this one cleared) reads the record back as it was.
    _MEMO.clear()
    again = measure_fix(replace(ctx, measurements=MeasurementStore(folder)), "x", findings)
    assert not isinstance(again, str) and again.to_dict() == made.to_dict() and again.line() == made.line()
    # Each side's page faults per step were counted beside its times (getrusage in the child), and the
    # record read back gives the same counts.
    assert made.a_faults is not None and made.b_faults is not None and made.a_faults >= 0 <= made.b_faults
    assert again.to_dict()["here_a_faults_per_step"] == made.a_faults
    # Where the sides' faults differ by 1 MiB of pages a step or more, the line says so; else it does not.
    many = replace(made, a_faults=32002.0, b_faults=0.0)
    assert "; its written side took 32,002 page faults a step here, its fixed side 0: " in many.line()
    assert "page faults" not in replace(made, a_faults=100.0, b_faults=0.0, fresh=None).line()
    assert "page faults" not in replace(made, a_faults=None, b_faults=None, fresh=None).line()
    # These programs make 256 KiB of arrays a run whose pages the allocator's state decides (two f32
    # [8, 4096]): under 1 MiB, so no second child ran.
    assert made.fresh is None and again.to_dict()["fresh_pages"] is None and "mapped fresh" not in made.line()


def test_a_replay_far_slower_than_its_own_capture_on_that_machine_does_not_stand(capture: Path, tmp_path: Path) -> None:
    """Untraced on the machine that took the capture, side A cannot take twice the capture's time of
    its programs (the profiler slows a capture): a stored replay that did (a program replayed with
    made-up inputs whose loop then runs otherwise) leaves the model, said in one line."""
    folder, findings = _copy_without_measurements(capture, tmp_path)
    ctx = replace(load_context(folder), what_if=True, measurements=MeasurementStore(folder))
    made = measure_fix(ctx, "x", findings, seconds=0.5, cap_seconds=1.0)
    assert not isinstance(made, str), made
    step = statistics.median(ctx.step_times_us)
    assert made.same_machine and made.a_us <= NOT_THE_CAPTURE * step
    doc = json.loads((folder / FILE_NAME).read_text())
    (rec,) = [r for r in doc["records"] if r["kind"] == KIND]
    scale = 3 * NOT_THE_CAPTURE * step / made.a_us
    rec["samples"]["a"] = [v * scale for v in rec["samples"]["a"]]
    rec["samples"]["b"] = [v * scale for v in rec["samples"]["b"]]
    (folder / FILE_NAME).write_text(json.dumps(doc))
    _MEMO.clear()
    got = measure_fix(replace(ctx, measurements=MeasurementStore(folder)), "x", findings)
    assert isinstance(got, str) and got.startswith("the replay does not stand for the capture: its programs took ")
    assert "x the capture's whole step on this same machine" in got
    _MEMO.clear()


def test_a_library_finding_is_removed_by_its_replay_or_keeps_its_model_saying_why(capture: Path, tmp_path: Path) -> None:
    """A finding in a library's code (a remedy, no fix): its replay's figure where one stands, else
    the rule's model with the reason on its line; nothing where no replay runs on this machine."""
    folder, findings = _copy_without_measurements(capture, tmp_path)
    copy = next(f for f in findings if f.code == "HD002")
    library = replace(copy, fix="", remedy="the library's own setting")
    store = MeasurementStore(folder)
    ctx = replace(load_context(folder), what_if=True, measurements=store)
    made = measure_fix(ctx, "x", [library], seconds=0.5, cap_seconds=1.0)  # stored: replay_unfixed reads it back
    assert not isinstance(made, str), made
    d = diagnose(replace(ctx, what_if=False), load_rulebook())
    d = replace(d, findings=(library,), removed=())
    _MEMO.clear()
    (kept,) = replay_unfixed(ctx, d).removed
    assert kept.replay is not None and kept.name.startswith("HD002 at ") and kept.name.endswith(", removed")
    # The stored replay scaled past what the capture's own machine allows: the model, and why.
    doc = json.loads((folder / FILE_NAME).read_text())
    (rec,) = [r for r in doc["records"] if r["kind"] == KIND]
    scale = 3 * NOT_THE_CAPTURE * statistics.median(ctx.step_times_us) / made.a_us
    rec["samples"]["a"] = [v * scale for v in rec["samples"]["a"]]
    (folder / FILE_NAME).write_text(json.dumps(doc))
    _MEMO.clear()
    (model,) = replay_unfixed(replace(ctx, measurements=MeasurementStore(folder)), d).removed
    assert model.replay is None and model.basis == "model" and model.net_us == library.recoverable_us
    assert "; a model (not measured: the replay does not stand for the capture: " in model.body(None)
    # A capture no replay runs for here (another backend): left as it was.
    assert replay_unfixed(replace(ctx, backend="tpu"), d).removed == ()
    _MEMO.clear()


def test_the_allocators_other_state_is_timed_in_a_second_child_that_maps_each_large_buffer_fresh(
        tmp_path: Path) -> None:
    # An eager astype making an 8 MiB float32 array each step (2,048 pages of 4 KiB). glibc soon reuses
    # such an array (its threshold rises to the largest one freed); the second child's fixed threshold
    # maps it fresh every step, so the kernel counts a fault per page a step there (getrusage).
    x = jax.random.normal(jax.random.key(1), (64, 32768), jnp.float32).astype(jnp.bfloat16)
    pick = jax.jit(lambda v: jnp.argmax(v, axis=-1))
    run = capture_callable(lambda: pick(x.astype(jnp.float32)), steps=3, warmup=1, out_dir=tmp_path / "run",
                           target="test:big")
    store = MeasurementStore(run)
    ctx = replace(load_context(run), what_if=True, measurements=store)
    findings = [f for f in diagnose(replace(ctx, what_if=False), load_rulebook()).findings if f.code in ("HD003", "HD004")]
    made = measure_fix(ctx, "x", findings, seconds=0.5, cap_seconds=1.0)
    assert not isinstance(made, str), made
    assert made.fresh is not None
    pages = 64 * 32768 * 4 // 4096
    assert made.fresh.a_faults is not None and made.fresh.a_faults >= 0.9 * pages
    assert made.fresh.b_faults is not None and made.fresh.b_faults < 0.1 * pages  # the fixed side makes none
    assert f"{made.fresh.a_faults:,.0f} page faults a step on its written side" in made.line()
    # Stored with the first child's and read back alike by another process (a fresh store, no memo).
    _MEMO.clear()
    again = measure_fix(replace(ctx, measurements=MeasurementStore(run)), "x", findings)
    assert not isinstance(again, str) and again.fresh == made.fresh and again.to_dict() == made.to_dict()
    fresh = again.to_dict()["fresh_pages"]
    assert isinstance(fresh, dict) and fresh["env"] == {"MALLOC_MMAP_THRESHOLD_": "131072"}
    # The promise's range holds both children's intervals; without the second child it is the first's.
    lo, hi = made.promise_interval_us
    first, second = made._promised(made.interval_us, made.a_us), made._promised(made.fresh.interval_us, made.fresh.a_us)
    assert (lo, hi) == (min(first[0], second[0]), max(first[1], second[1]))
    assert replace(made, fresh=None).promise_interval_us == first
    assert "with every large buffer mapped fresh (the allocator's other state)" in made.line()
    assert "mapped fresh" not in replace(made, fresh=None).line()


def test_the_stopping_rule_decides_a_clear_change_and_a_negligible_one_and_waits_otherwise() -> None:
    a = [100.0 + (i % 3) for i in range(40)]
    assert decision(a, [x - 20.0 for x in a], 1) == "saving"
    assert decision(a, [x + 20.0 for x in a], 1) == "slower"
    # Differences alternating within +-0.5% of side A: no change worth a promise.
    assert decision(a, [x + (0.5 if i % 2 else -0.5) for i, x in enumerate(a)], 1) == "negligible"
    # Alternating +-30%: the interval holds 0 and reaches far beyond the band; add pairs.
    assert decision(a, [x + (30.0 if i % 2 else -30.0) for i, x in enumerate(a)], 1) == ""
    # A median saving of 1 with a third of the pairs at 60: significant, but its interval is wider than the saving
    # itself, so pairs are added (stopping there overstates the change); at the cap it decides as it stands.
    wide = [x - (1.0 if i % 3 else 60.0) for i, x in enumerate(a)]
    assert decision(a, wide, 1) == "" and decision(a, wide, 1, precise=False) == "saving"
    # Later looks decide at a higher confidence (the error spent over the looks sums to 5%).
    assert look_confidence(1) < look_confidence(2) < 1.0 and look_confidence(1) > 0.95


def _proto(f: object, *args: jax.Array) -> bytes:
    lowered = f.lower(*args)  # type: ignore[attr-defined]
    return bytes(lowered.compile().runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto())


def _child(tmp_path: Path, spec: ReplaySpec) -> dict[str, object]:
    spec.write(tmp_path / "spec.json")
    child_main([str(tmp_path / "spec.json"), str(tmp_path / "out.json")])
    doc: dict[str, object] = json.loads((tmp_path / "out.json").read_text())
    assert doc["ok"], doc
    return doc


def test_the_changed_programs_compiled_hlo_lacks_what_the_change_removes(tmp_path: Path) -> None:
    wide = jnp.zeros((B, V), jnp.float32)
    sample = jax.jit(lambda x: (jnp.argmax(x, -1), x))
    softmax = jax.jit(lambda x: jnp.argmax(jax.nn.softmax(x), -1))
    (tmp_path / "sample.pb").write_bytes(_proto(sample, wide))
    (tmp_path / "softmax.pb").write_bytes(_proto(softmax, wide))
    carried = (Parameter("f32", (B, V), (0, 1)),)
    doc = _child(tmp_path, ReplaySpec(
        a=(Call("sample", "sample.pb", carried), Call("softmax", "softmax.pb", (Parameter("f32", (B, V)),))),
        b=(Call("sample", "sample.pb", carried, alias=((0, (1,)),), narrow=((0, "bf16"),)),
           Call("softmax", "softmax.pb", (Parameter("f32", (B, V)),), drop_maps=True)),
        seconds=0.2, min_pairs=4))
    a_ops, b_ops = doc["a_ops"], doc["b_ops"]
    assert isinstance(a_ops, list) and isinstance(b_ops, list)
    # XLA compiled the copy into side A and none into side B, whose output aliases the parameter.
    assert a_ops[0].get("copy", 0) >= 1 and b_ops[0].get("copy", 0) == 0
    assert doc["b_aliased"] == [True, False]
    # The softmax's exp ran on side A only; side B's argmax reads the logits themselves.
    assert a_ops[1].get("exponential", 0) >= 1 and b_ops[1].get("exponential", 0) == 0
    assert doc["b_rewired"] == [0, 1]
    assert len(doc["a_us"]) == len(doc["b_us"]) >= 4  # type: ignore[arg-type]


def test_a_softmax_behind_argmax_special_value_select_is_dropped_too(tmp_path: Path) -> None:
    """keras' ``ops.argmax`` on JAX sets -0.0 apart with a select before the reduce (as the captured
    keras-hub sampler does): the selection and that select's test both read the logits then."""

    def keras_like(x: jax.Array) -> jax.Array:
        p = jax.nn.softmax(x)
        return jnp.argmax(jnp.where((p == 0) & jnp.signbit(p), -1.17549435e-38, p), -1)

    (tmp_path / "k.pb").write_bytes(_proto(jax.jit(keras_like), jnp.zeros((B, V), jnp.float32)))
    wide = (Parameter("f32", (B, V)),)
    doc = _child(tmp_path, ReplaySpec(a=(Call("k", "k.pb", wide),), b=(Call("k", "k.pb", wide, drop_maps=True),),
                                      seconds=0.2, min_pairs=4))
    a_ops, b_ops = doc["a_ops"], doc["b_ops"]
    assert isinstance(a_ops, list) and isinstance(b_ops, list)
    assert doc["b_rewired"] == [1]
    assert a_ops[0].get("exponential", 0) >= 1 and b_ops[0].get("exponential", 0) == 0


def test_a_top_k_of_log_probabilities_compiles_and_reads_the_logits_instead(tmp_path: Path) -> None:
    """``top_k(log_softmax(h @ w))``: XLA:CPU keeps the top-k as its TopK call, whose comparator reads
    each f32 as an s32 (an HLO bitcast that changes the element type: a ``bitcast_convert``, not a
    reshape, or the module does not compile). Side B's top-k reads the matmul's output itself."""
    h, w = jnp.zeros((B, 64), jnp.float32), jnp.zeros((64, V), jnp.float32)
    top = jax.jit(lambda h, w: jax.lax.top_k(jax.nn.log_softmax(h @ w, axis=-1), 4)[1])
    (tmp_path / "t.pb").write_bytes(_proto(top, h, w))
    args = (Parameter("f32", (B, 64)), Parameter("f32", (64, V)))
    doc = _child(tmp_path, ReplaySpec(a=(Call("t", "t.pb", args),), b=(Call("t", "t.pb", args, drop_maps=True),),
                                      seconds=0.2, min_pairs=4))
    a_ops, b_ops = doc["a_ops"], doc["b_ops"]
    assert isinstance(a_ops, list) and isinstance(b_ops, list)
    assert doc["b_rewired"] == [1]
    assert a_ops[0].get("exponential", 0) >= 1 and b_ops[0].get("exponential", 0) == 0
    assert a_ops[0].get("log", 0) >= 1 and b_ops[0].get("log", 0) == 0


def test_a_narrowed_argmax_reads_the_narrow_parameter_itself(tmp_path: Path) -> None:
    argmax = jax.jit(lambda x: jnp.argmax(x, -1))
    (tmp_path / "argmax.pb").write_bytes(_proto(argmax, jnp.zeros((B, V), jnp.float32)))
    wide = (Parameter("f32", (B, V)),)
    doc = _child(tmp_path, ReplaySpec(
        a=(Call("argmax", "argmax.pb", wide),),
        b=(Call("argmax", "argmax.pb", wide, narrow=((0, "bf16"),)),
           Call("argmax", "argmax.pb", wide, narrow=((0, "bf16"),), narrow_reads=(0,))),
        seconds=0.2, min_pairs=4))
    b_ops = doc["b_ops"]
    assert isinstance(b_ops, list)
    # Reading bf16 itself (HD004's change), the program XLA compiles is the one jax compiles for an
    # argmax over bf16 (the judge: jax's own compile of the hand-fixed program); widened inside the
    # program (HD003's change alone), it is not.
    fixed = opcodes(argmax.lower(jnp.zeros((B, V), jnp.bfloat16)).compile().as_text() or "")
    assert b_ops[1] == fixed and b_ops[0] != fixed
    assert doc["b_rewired"] == [0, 1]


def test_a_narrowed_max_reduces_the_narrow_tensor_and_widens_its_rows(tmp_path: Path) -> None:
    """A row max whose value is the output (no index): max(widen(x)) == widen(max(x)), so side B reduces
    the bf16 tensor and widens the row results, as the hand fix ``jnp.max(x).astype(f32)`` does. Judge:
    XLA's compile of that hand fix has the same ops as the replay's side B; the widened read does not."""
    widened = jax.jit(lambda x: jnp.max(x, axis=-1))
    (tmp_path / "max.pb").write_bytes(_proto(widened, jnp.zeros((B, V), jnp.float32)))
    wide = (Parameter("f32", (B, V)),)
    doc = _child(tmp_path, ReplaySpec(
        a=(Call("max", "max.pb", wide),),
        b=(Call("max", "max.pb", wide, narrow=((0, "bf16"),)),
           Call("max", "max.pb", wide, narrow=((0, "bf16"),), narrow_reads=(0,))),
        seconds=0.2, min_pairs=4))
    b_ops = doc["b_ops"]
    assert isinstance(b_ops, list) and doc["b_rewired"] == [0, 1]
    hand = jax.jit(lambda x: jnp.max(x, axis=-1).astype(jnp.float32))
    fixed = opcodes(hand.lower(jnp.zeros((B, V), jnp.bfloat16)).compile().as_text() or "")
    assert b_ops[1] == fixed and b_ops[0] != fixed


def test_a_capture_of_another_jax_or_backend_is_refused_in_one_line_and_stays_a_model(capture: Path) -> None:
    ctx = replace(load_context(capture), what_if=True)
    for other in (replace(ctx, versions=(("jax", "0.0.1"), ("jaxlib", "0.0.1"))), replace(ctx, backend="gpu")):
        why = measure_fix(other, "bf16-greedy-sampler", [])
        assert isinstance(why, str) and why and "\n" not in why
        promise = next(p for p in diagnose(other, load_rulebook()).fixes if p.fix == "bf16-greedy-sampler")
        assert promise.basis == "model" and promise.unmeasured == why
        assert promise.net_us == promise.model_us and promise.model_range_us[0] <= promise.model_us
    # The CLI on captures this machine cannot replay: the model line with the reason, exit 0 (never 3).
    from click.testing import CliRunner

    samples = Path(__file__).resolve().parents[2] / "sample_traces"
    # The H200 capture: another jax here (its own is 0.11.2), or, under that jax, no GPU runtime.
    gpu = replay_refusal(replace(load_context(samples / "gpu_h200_original"), what_if=True))
    assert gpu.startswith(("the capture ran jax 0.11.2", "the capture is from XLA:GPU and this machine has no GPU"))
    for sample, reason in (("gpu_h200_original", gpu), ("engine_b64_original_a", "the capture ran jax 0.10.2")):
        r = CliRunner().invoke(main, ["diagnose", str(samples / sample)], env={"GITHUB_ACTIONS": ""},
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        if sample.startswith("gpu") or jax.__version__ != "0.10.2":
            assert f"a model (not measured: {reason}" in r.stderr
        else:
            assert "measured by replaying" in r.stderr


def test_the_median_interval_is_the_sign_tests() -> None:
    # n = 10: P(Binomial(10, 1/2) <= 1) = 0.0107 <= 0.025 < P(<= 2): ranks 2 and 9.
    assert median_interval([float(i) for i in range(10, 0, -1)]) == (2.0, 9.0)
    assert median_interval([3.0, 1.0]) == (1.0, 3.0)  # too few pairs: the whole range


def test_the_promise_scales_the_captures_median_step_not_its_mean(capture: Path) -> None:
    """Side A's time in the capture is each program's median over the traced steps (the capture's own
    per-step op times, as its opstats.json exports them): a step a loaded machine slowed moves the
    mean, not the median the replay's pairs report."""
    import statistics

    ctx = replace(load_context(capture), what_if=True)
    d = diagnose(ctx, load_rulebook())
    m = next(p for p in d.fixes if p.fix == "bf16-greedy-sampler").replay
    assert m is not None
    doc = json.loads((capture / "opstats.json").read_text())
    cols = doc["per_step"]["columns"]
    rows = [dict(zip(cols, r, strict=True)) for r in doc["per_step"]["rows"]]
    steps = sorted({r["step"] for r in rows})
    want = 0.0
    for key in m.programs:  # ``name(program id)``
        name, _, pid = key.rstrip(")").partition("(")
        mine = [r for r in rows if r["module"] == name and str(r["program_id"]) == pid]
        want += statistics.median(sum(r["time_us"] for r in mine if r["step"] == s) for s in steps)
    assert m.capture_us == pytest.approx(want, rel=1e-6)
    assert m.capture_promise_us == pytest.approx(m.fraction * m.capture_us + m.modelled_us)


def test_a_capture_taken_here_promises_the_saving_here_and_one_from_elsewhere_the_captures_pace(
        capture: Path, tmp_path: Path) -> None:
    """The capture's run.json names the machine ``profile`` ran on: there the promise is the saving
    the replay measured, untraced; the same capture relabelled as another machine's promises that
    saving's share of the capture's time (the profiler's pace); the share of the step printed is the
    capture's either way."""
    from hlo_doctor.core.machine import machine_here
    from hlo_doctor.lint.store import capture_machine

    folder = tmp_path / "run"
    shutil.copytree(capture, folder)
    run_json = folder / "run.json"
    doc = json.loads(run_json.read_text())
    assert doc["machine"] == machine_here() == capture_machine(folder)
    findings = [f for f in diagnose(replace(load_context(folder), what_if=False), load_rulebook()).findings
                if f.code in ("HD002", "HD003")]
    ctx = replace(load_context(folder), what_if=True, measurements=MeasurementStore(folder))
    here = measure_fix(ctx, "x", findings, seconds=0.5, cap_seconds=2.0)
    assert not isinstance(here, str), here
    assert here.same_machine and here.promise_pace == "here, untraced"
    assert here.promise_us == pytest.approx(here.saving_us + here.modelled_us * here.a_us / here.capture_us)
    assert here.promise_interval_us[0] == pytest.approx(here.interval_us[0] + here.promise_us - here.saving_us)
    assert "the capture was taken on this machine, so that is the promise, untraced" in here.line()
    # The same capture, relabelled as another machine's (the measurement itself unchanged).
    run_json.write_text(json.dumps({**doc, "machine": "elsewhere; some cpu; 64 cores"}))
    there = measure_fix(ctx, "x", findings)
    assert not isinstance(there, str) and not there.same_machine and there.promise_pace == "the capture's"
    assert (there.a_us, there.b_us, there.saving_us) == (here.a_us, here.b_us, here.saving_us)
    assert there.promise_us == pytest.approx(there.fraction * there.capture_us + there.modelled_us)
    assert there.promise_us == pytest.approx(here.capture_promise_us)
    assert "at the capture's pace" in there.line() and "taken on this machine" not in there.line()
    # A run.json without a machine (written before it was recorded, or an attached capture): elsewhere.
    del doc["machine"]
    run_json.write_text(json.dumps(doc))
    assert capture_machine(folder) == ""
    again = measure_fix(ctx, "x", findings)
    assert not isinstance(again, str) and again.to_dict() == there.to_dict()
    assert there.to_dict()["same_machine"] is False and here.to_dict()["same_machine"] is True


def test_a_program_whose_loop_runs_as_its_inputs_decide_is_not_replayed(tmp_path: Path) -> None:
    """XLA states a loop's trip count where it can count it (``known_trip_count``): a loop run until
    its inputs say stop (a generate loop) would run another count on the replay's made-up inputs, so
    its replay is refused before anything compiles; a counted loop (``fori_loop``) is replayed."""
    from hlo_doctor.lint.replay.plan import plan

    x = jax.random.normal(jax.random.key(1), (B, V), jnp.float32)

    @jax.jit
    def until(logits: jax.Array, n: jax.Array) -> tuple[jax.Array, jax.Array]:
        _, acc = jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + jnp.argmax(logits, -1)),
                                    (jnp.int32(0), jnp.zeros(B, jnp.int32)))
        return acc, logits  # its input returned: a copy (HD002)

    @jax.jit
    def counted(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        acc = jax.lax.fori_loop(0, 3, lambda _, a: a + jnp.argmax(logits, -1), jnp.zeros(B, jnp.int32))
        return acc, logits

    n = jnp.int32(3)
    for name, fn, loop_counted in (("until", lambda: until(x, n), False), ("counted", lambda: counted(x), True)):
        run = capture_callable(fn, steps=2, warmup=1, out_dir=tmp_path / name, target=f"test:{name}")
        ctx = replace(load_context(run), what_if=True)
        module = next(m for m in ctx.modules if m.name == f"jit_{name}")
        loops = [i for i in module.instructions() if i.opcode == "while"]
        assert loops and all(("known_trip_count" in i.attribute("backend_config")) == loop_counted for i in loops)
        copies = [f for f in diagnose(ctx, load_rulebook()).findings if f.code == "HD002"]
        assert copies, name
        got = plan(ctx, copies)
        if loop_counted:
            assert not isinstance(got, str), got
        else:
            assert got == (f"the replay does not stand for the capture: {module.name}({module.program_id}) runs a "
                           f"loop ({loops[0].name}) whose trip count its inputs decide (XLA's optimized HLO states "
                           "none), and the replay's inputs are random values and zeros, not the capture's")
