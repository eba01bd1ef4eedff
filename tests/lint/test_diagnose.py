"""diagnose end to end: real XLA:CPU captures and compiled HLO, the seed fixture, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding
from hlo_doctor.hlo import parse_module
from hlo_doctor.lint import Context, diagnose, load_context, load_rulebook, total_recoverable

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "sample_traces" / "seed_v5e_b512"
BOOK = load_rulebook()
# XLA:CPU widens these programs' bf16 weight on every call (HD014, tests/rules/test_hd014.py; its
# memory half, HD019, stands alone when HD014 is left out); the tests below are about the sampler's rules.
NOT_SAMPLER = ("HD014", "HD019", "HD015")
# (HD015, the step host-bound, follows the machine's load while the fixture profiled: under a loaded
# test run these small steps are dispatch-bound. tests/lint/test_host_cost.py judges it.)

# A decode tail shaped like the serving stack's: the runner widens bf16 logits eagerly, then a jitted
# greedy sample() takes argmax and returns its (f32) input.
ORIGINAL_STEP = """
import jax, jax.numpy as jnp

B, V = 8, 2048
_w = jax.random.normal(jax.random.PRNGKey(0), (64, V), jnp.float32).astype(jnp.bfloat16)
_h = jax.random.normal(jax.random.PRNGKey(1), (B, 64), jnp.float32).astype(jnp.bfloat16)

@jax.jit
def compute_logits(h, w):
    return h @ w

@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1), logits

def step():
    logits = compute_logits(_h, _w).astype(jnp.float32)
    return sample(logits)
"""

# The same step, clean: argmax on bf16 in-graph, f32 logits produced inside the program (softmax,
# log-softmax really need them), and a donated state update.
CLEAN_STEP = """
import jax, jax.numpy as jnp
from functools import partial

B, V = 8, 2048
_w = jax.random.normal(jax.random.PRNGKey(0), (64, V), jnp.float32).astype(jnp.bfloat16)
_h = jax.random.normal(jax.random.PRNGKey(1), (B, 64), jnp.float32).astype(jnp.bfloat16)
_state = [jnp.zeros((B, 64), jnp.float32)]

@jax.jit
def greedy(h, w):
    logits = h @ w
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.argmax(logits, axis=-1), probs, logp

@partial(jax.jit, donate_argnums=0)
def update(state, h):
    return state * 0.5 + h.astype(jnp.float32)

def step():
    toks, probs, logp = greedy(_h, _w)
    _state[0] = update(_state[0], _h)
    return toks, probs, logp, _state[0]
"""


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _profile(tmp: Path, name: str, program: str) -> Path:
    # An eager astype of a shape compiled earlier in this process reuses that executable, and with
    # it the source line of whoever compiled it first: start from empty caches.
    jax.clear_caches()
    src = tmp / f"{name}.py"
    src.write_text(textwrap.dedent(program))
    out = tmp / f"run_{name}"
    result = _invoke("profile", f"{src}:step", "--steps", "4", "--warmup", "2", "--out", str(out),
                     "--format", "json")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    return out


def _codes_ops(findings: tuple[Finding, ...] | list[Finding]) -> set[tuple[str, str, str]]:
    return {(f.code, f.module, f.op) for f in findings}


@pytest.fixture(scope="module")
def original_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _profile(tmp_path_factory.mktemp("diag"), "original", ORIGINAL_STEP)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _profile(tmp_path_factory.mktemp("diag"), "clean", CLEAN_STEP)


# -- real captures ---------------------------------------------------------------------------------

def test_original_step_flags_the_three_ops_and_nothing_else(original_run: Path) -> None:
    result = diagnose(load_context(original_run), BOOK, ignore=NOT_SAMPLER)
    got = _codes_ops(result.findings)
    # No HD001: the widened logits are also returned, so HD003/HD004 hold what there is to save.
    assert got == {
        ("HD003", "jit_convert_element_type", "wrapped_convert"),
        ("HD002", "jit_sample", "copy"),
        ("HD004", "jit_sample", "iota_reduce_fusion"),
    }, got
    by_code = {f.code: f for f in result.findings}
    for f in result.findings:
        assert f.time_per_step_us is not None and f.time_per_step_us > 0
        assert f.pct_of_step is not None and f.fix == "bf16-greedy-sampler"
    assert "parameter 0" in by_code["HD002"].message and "output 1" in by_code["HD002"].message
    assert dict(by_code["HD004"].extra)["bytes_read"] == 8 * 2048 * 4
    assert dict(by_code["HD004"].extra)["bytes_needed"] == 8 * 2048 * 2
    # The source line is the program's own: the eager astype in step().
    assert by_code["HD003"].source.endswith("original.py:17")
    assert result.recoverable_us == pytest.approx(total_recoverable(result.findings))


def test_clean_step_has_no_findings(clean_run: Path) -> None:
    result = diagnose(load_context(clean_run), BOOK, ignore=NOT_SAMPLER)
    assert result.findings == (), [f.message for f in result.findings]
    assert result.summary_line() == "no findings"


def test_cli_json_shape_and_fail_on(original_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    r = _invoke("diagnose", str(original_run), "--format", "json", "--output", str(out), "--fail-on", "info")
    assert r.exit_code == 1  # type: ignore[attr-defined]
    doc = json.loads(out.read_text())
    # Severity follows each finding's share of the step: --fail-on high fails on exactly those.
    r = _invoke("diagnose", str(original_run), "--format", "json", "--fail-on", "high")
    high = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "high"]  # type: ignore[attr-defined]
    assert r.exit_code == (1 if high else 0)  # type: ignore[attr-defined]
    assert doc["step_time_us"] > 0
    for f in doc["findings"]:
        assert {"code", "name", "module", "op", "shape", "time_per_step_us", "pct_of_step", "source",
                "fix", "recoverable_us", "evidence", "severity"} <= set(f)
    r = _invoke("diagnose", str(original_run), "--format", "json", "--fail-on", "error")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    r = _invoke("diagnose", str(original_run), "--format", "json", "--select", "HD002")
    assert {f["code"] for f in json.loads(r.stdout)["findings"]} == {"HD002"}  # type: ignore[attr-defined]
    # Without HD003 the convert program's memory half (HD017) has no time finding to join: it stands.
    r = _invoke("diagnose", str(original_run), "--format", "json", "--ignore", "HD001,HD003,HD014,HD019,HD015")
    assert {f["code"] for f in json.loads(r.stdout)["findings"]} == {"HD002", "HD004", "HD017"}  # type: ignore[attr-defined]


def test_bare_xplane_input(original_run: Path) -> None:
    xplane = next(original_run.glob("plugins/profile/*/*.xplane.pb"))
    result = diagnose(load_context(xplane), BOOK, ignore=NOT_SAMPLER)
    assert {f.code for f in result.findings} == {"HD002", "HD003", "HD004"}


# -- the seed's numbers ----------------------------------------------------------------------------

def _golden_view(result_json: dict) -> dict:
    keys = ("code", "name", "severity", "module", "op", "shape", "program_id", "time_per_step_us",
            "pct_of_step", "bytes_accessed", "recoverable_us", "source", "fix")
    return {
        "step_time_us": result_json["step_time_us"],
        "recoverable_us": round(result_json["recoverable_us"], 3),
        "summary": result_json["summary"],
        "findings": [{**{k: (round(f[k], 3) if isinstance(f[k], float) else f[k]) for k in keys},
                      "parts": {name: round(us, 3) for name, us in f["parts"].items()}}
                     for f in result_json["findings"]],
    }


def test_seed_fixture_matches_golden() -> None:
    r = _invoke("diagnose", str(SEED), "--format", "json")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    view = _golden_view(json.loads(r.stdout))  # type: ignore[attr-defined]
    golden = SEED / "expected.json"
    if os.environ.get("HLO_DOCTOR_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(view, indent=1) + "\n")
    assert view == json.loads(golden.read_text())


def test_seed_fixture_reports_three_ops_and_twelve_percent() -> None:
    result = diagnose(load_context(SEED), BOOK)
    ops = {(f.code, f.op) for f in result.findings}
    assert ops == {("HD002", "copy.2"), ("HD003", "convert_element_type.1"), ("HD004", "fusion.3")}
    by_code = {f.code: f for f in result.findings}
    assert by_code["HD002"].time_per_step_us == pytest.approx(1562)
    assert by_code["HD003"].time_per_step_us == pytest.approx(1232)
    assert by_code["HD004"].recoverable_us == pytest.approx(348)
    # 1,562 + 1,232 + 696/2.
    assert result.recoverable_us == pytest.approx(3142)
    assert result.summary_line() == "3 findings: ~3.1 ms of ~26.5 ms per step (~12%) is recoverable"
    assert by_code["HD003"].source.endswith("tpu_runner.py:1624")
    assert by_code["HD004"].source.endswith("sampling.py:125")


# -- HLO-only inputs -------------------------------------------------------------------------------

def test_single_hlo_text_file_has_no_time(tmp_path: Path) -> None:
    f32 = jnp.zeros((8, 1024), jnp.float32)
    text = jax.jit(lambda x: (jnp.argmax(x, -1), x)).lower(f32).compile().as_text()
    path = tmp_path / "sample.hlo.txt"
    path.write_text(text)
    result = diagnose(load_context(path), BOOK)
    assert {f.code for f in result.findings} == {"HD002"}
    assert all(f.time_per_step_us is None for f in result.findings)
    assert result.recoverable_us is None
    assert "no time estimate" in result.summary_line()
    assert ("HD003", "needs op stats (a trace)") in result.rules_skipped


def test_xla_dump_folder(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    program = textwrap.dedent("""
        import jax, jax.numpy as jnp
        x = jnp.zeros((8, 1024), jnp.bfloat16)
        y = x.astype(jnp.float32)
        jax.jit(lambda l: (jnp.argmax(l, -1), l)).lower(y).compile()
    """)
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=120)
    ctx = load_context(dump)
    assert ctx.kind == "xla-dump" and len(ctx.modules) >= 2
    result = diagnose(ctx, BOOK)
    got = {(f.code, f.module) for f in result.findings}
    assert ("HD002", "jit__lambda") in got
    assert ("HD004", "jit__lambda") in got  # paired with the eager convert's program in the dump
    assert all(f.time_per_step_us is None for f in result.findings)


@pytest.mark.parametrize("name,fn,dtype", [
    ("matmul_softmax", lambda h, w: jax.nn.softmax((h @ w).astype(jnp.float32), -1), jnp.bfloat16),
    ("log_softmax", lambda h, w: jax.nn.log_softmax((h @ w).astype(jnp.float32), -1), jnp.bfloat16),
    ("greedy_bf16_fixed", lambda h, w: (jnp.argmax(h @ w, -1), (h @ w).astype(jnp.float32)), jnp.bfloat16),
    ("max_then_sub", lambda h, w: (h @ w).astype(jnp.float32) - jnp.max((h @ w).astype(jnp.float32)), jnp.bfloat16),
])
def test_clean_compiled_programs(name: str, fn: object, dtype: object) -> None:
    h = jnp.zeros((8, 64), dtype)  # type: ignore[arg-type]
    w = jnp.zeros((64, 1024), dtype)  # type: ignore[arg-type]
    text = jax.jit(fn).lower(h, w).compile().as_text()  # type: ignore[arg-type]
    result = diagnose(Context(modules=(parse_module(text),)), BOOK, ignore=NOT_SAMPLER)
    assert result.findings == (), [f.message for f in result.findings]


def test_donated_update_is_clean() -> None:
    x = jnp.zeros((8, 1024), jnp.float32)
    text = jax.jit(lambda s: s, donate_argnums=0).lower(x).compile().as_text()
    assert "input_output_alias" in text
    assert diagnose(Context(modules=(parse_module(text),)), BOOK).findings == ()


def test_widening_fused_into_argmax_on_cpu_is_not_a_finding() -> None:
    # The fusion reads bf16 and widens in registers: no bytes to save, nothing to flag.
    x = jnp.zeros((8, 1024), jnp.bfloat16)
    text = jax.jit(lambda v: jnp.argmax(v.astype(jnp.float32), -1)).lower(x).compile().as_text()
    assert "convert_element_type" in text
    result = diagnose(Context(modules=(parse_module(text),)), BOOK)
    assert result.findings == (), [f.message for f in result.findings]


# -- bad input and broken rules --------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02garbage", b"HloModule broken\n\nENTRY %m (p: f32[2]) -> f32[2] {\n"])
def test_corrupt_or_empty_hlo_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.hlo.txt"
    path.write_bytes(content)
    with pytest.raises(InputError):
        load_context(path)
    r = _invoke("diagnose", str(path))
    assert r.exit_code == 2  # type: ignore[attr-defined]
    assert "bad.hlo.txt" in r.output and "Traceback" not in r.output  # type: ignore[attr-defined]


def test_missing_and_empty_inputs(tmp_path: Path) -> None:
    r = _invoke("diagnose", str(tmp_path / "nope"))
    assert r.exit_code == 2 and "does not exist" in r.output  # type: ignore[attr-defined]
    (tmp_path / "empty").mkdir()
    r = _invoke("diagnose", str(tmp_path / "empty"))
    assert r.exit_code == 2 and "no trace" in r.output  # type: ignore[attr-defined]
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "opstats.json").write_text("{not json")
    r = _invoke("diagnose", str(corrupt))
    assert r.exit_code == 2 and "opstats.json" in r.output  # type: ignore[attr-defined]
    bad_xplane = tmp_path / "x.xplane.pb"
    bad_xplane.write_bytes(b"\xff\xfe not a protobuf")
    r = _invoke("diagnose", str(bad_xplane))
    assert r.exit_code == 2, r.output  # type: ignore[attr-defined]


def test_unknown_rule_id_is_a_usage_error() -> None:
    r = _invoke("diagnose", str(SEED), "--select", "HD999")
    assert r.exit_code == 2 and "unknown rule id" in r.output  # type: ignore[attr-defined]


BROKEN_RULE = "from hlo_doctor.lint import Rule\nclass Broken(Rule:\n    pass\n"
CRASHING_RULE = '''
from hlo_doctor.core.model import Severity
from hlo_doctor.lint import Example, Rule

class Crashes(Rule):
    """Always crashes.

    What it flags:
        Nothing.
    Why it costs:
        Nothing.
    Example:
        None.
    Fix:
        None.
    """
    code = "XX101"
    name = "test.crashes"
    severity = Severity.LOW
    requires = ("hlo",)
    VALID = ()
    INVALID = ()

    def check(self, ctx):
        raise RuntimeError("boom")
        yield
'''
COPY_COUNTER_RULE = '''
from hlo_doctor.core.model import Severity
from hlo_doctor.lint import Example, Rule

class EveryCopy(Rule):
    """Flags every copy.

    What it flags:
        Copies.
    Why it costs:
        Bytes.
    Example:
        copy(x).
    Fix:
        None.
    """
    code = "XX100"
    name = "test.every-copy"
    severity = Severity.INFO
    requires = ("hlo",)
    VALID = ()
    INVALID = ()

    def check(self, ctx):
        for m in ctx.modules:
            for i in m.entry.instructions:
                if i.opcode == "copy":
                    yield ctx.finding(self, m, i, "a copy", recoverable_fraction=0.0)
'''


def test_user_rules_broken_and_crashing(tmp_path: Path) -> None:
    rules = tmp_path / "myrules"
    rules.mkdir()
    (rules / "xx100_every_copy.py").write_text(COPY_COUNTER_RULE)
    (rules / "xx101_crashes.py").write_text(CRASHING_RULE)
    (rules / "xx102_broken.py").write_text(BROKEN_RULE)
    r = _invoke("diagnose", str(SEED), "--rules", str(rules), "--format", "json")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    doc = json.loads(r.stdout)  # type: ignore[attr-defined]
    codes = [f["code"] for f in doc["findings"]]
    # The bundled rules and the working user rule still ran.
    assert {"HD002", "HD003", "HD004", "XX100"} <= set(codes)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert {f["code"] for f in errors} == {"XX101", "HD000"}
    assert any("xx102_broken.py" in f["message"] and "SyntaxError" in f["message"] for f in errors)
    assert any("boom" in f["message"] for f in errors)
    r = _invoke("diagnose", str(SEED), "--rules", str(rules), "--format", "json", "--fail-on", "error")
    assert r.exit_code == 1  # type: ignore[attr-defined]
    r = _invoke("rules", "--rules", str(rules), "--format", "json")
    listed = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert "XX100" in [x["code"] for x in listed["rules"]] and listed["errors"]
    r = _invoke("diagnose", str(SEED), "--rules", str(tmp_path / "missing"))
    assert r.exit_code == 2  # type: ignore[attr-defined]


def test_rule_code_clash_is_reported(tmp_path: Path) -> None:
    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "hd002_mine.py").write_text(COPY_COUNTER_RULE.replace('"XX100"', '"HD002"'))
    book = load_rulebook([rules])
    assert [e.reason for e in book.errors] == ["code HD002 is already used by hd002_aliasing_copy.py"]
    assert book.get("HD002") is not None and book.get("HD002").bundled  # type: ignore[union-attr]


# -- rules command ---------------------------------------------------------------------------------

def test_rules_list_and_explain() -> None:
    r = _invoke("rules", "--format", "json")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    codes = [x["code"] for x in json.loads(r.stdout)["rules"]]  # type: ignore[attr-defined]
    assert codes == sorted(codes) and {"HD001", "HD006"} <= set(codes)
    r = _invoke("rules", "explain", "hd002")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    for heading in ("What it flags", "Why it costs", "Example", "Fix"):
        assert heading in r.output  # type: ignore[attr-defined]
    r = _invoke("rules", "explain", "HD999")
    assert r.exit_code == 2 and "unknown rule id" in r.output  # type: ignore[attr-defined]


def test_round_trip_and_ineffective_donation_compiled() -> None:
    x = jnp.zeros((8, 1024), jnp.float32)
    round_trip = jax.jit(lambda v: v.astype(jnp.bfloat16).astype(jnp.float32)).lower(x).compile().as_text()
    twice = jax.jit(lambda v: (v, v), donate_argnums=0).lower(x).compile().as_text()
    result = diagnose(Context(modules=(parse_module(round_trip), parse_module(twice))), BOOK)
    assert {(f.code, f.op) for f in result.findings} == {("HD007", "convert_convert_fusion"),
                                                        ("HD008", "copy.2")}


OFF_MENU_STEP = """
import jax, jax.numpy as jnp

@jax.jit
def sample(logits):
    return jnp.argmax(logits, axis=-1)

_n = [0]

def step():
    _n[0] += 1
    # A new vocabulary size every call: each traced step compiles sample() again.
    return sample(jnp.zeros((8, 1024 + _n[0]), jnp.bfloat16))
"""


def test_compiles_inside_the_window_are_named(tmp_path: Path) -> None:
    run = _profile(tmp_path, "off_menu", OFF_MENU_STEP)
    result = diagnose(load_context(run), BOOK)
    hd005 = {f.module: f for f in result.findings if f.code == "HD005"}
    # sample() compiles for each new vocabulary size; the eager jnp.zeros of that new shape compiles
    # a one-op program too, counted apart as an eager op.
    assert set(hd005) == {"jit_sample", ""}, [f.message for f in result.findings]
    f = hd005["jit_sample"]
    assert "bf16[8,102" in f.message and "jit_sample is compiled on every call: 4 compiles in 4 steps" in f.message
    assert f.time_per_step_us and f.recoverable_us == f.time_per_step_us
    assert hd005[""].message.startswith("4 eager ops compiled") and "broadcast_in_dim x4" in hd005[""].message
    assert [x.code for x in result.findings] == ["HD005", "HD005"]


def test_default_size_fixed_engine_trace_is_clean() -> None:
    # A real capture of the engine after apply-fix at the default size (batch 64, vocab 256000).
    run = ROOT / "sample_traces" / "engine_b64_fixed"  # committed; its absence must fail, not skip
    result = diagnose(load_context(run), BOOK)
    assert result.findings == (), [f.message for f in result.findings]
    assert result.step_time_us and "jit_sample" in " ".join(result.modules)


def test_widening_before_top_k_compiled() -> None:
    x = jnp.zeros((8, 1024), jnp.bfloat16)
    text = jax.jit(lambda v: jax.lax.top_k(v.astype(jnp.float32), 4)[1]).lower(x).compile().as_text()
    result = diagnose(Context(modules=(parse_module(text),)), BOOK)
    assert {(f.code, f.op) for f in result.findings} == {("HD001", "wrapped_convert"), ("HD004", "custom-call")}
    assert "top-k" in next(f for f in result.findings if f.code == "HD004").message
