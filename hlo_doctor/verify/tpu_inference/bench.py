"""Serving level of verify: a benchmark command run on baseline and treatment in interleaved rounds.

``--bench CMD`` is a shell command with ``{tree}`` (the tree to run) and ``{out}`` (the JSON file it
must write), e.g. ``vllm bench throughput ... --output-json {out}`` or, with the reference engine
standing in, ``hlo-doctor engine run --format json --engine {tree} --output {out}``. A tpu-inference
tree's root is put first on ``PYTHONPATH`` and tpu-inference's own recompilation check is switched on
(``VLLM_XLA_CHECK_RECOMPILATION=1``), so a step off the precompiled menu fails the round and is
counted as a compile. Figures are read from the JSON by vllm bench's field names, or by the
``--bench-metrics`` mapping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hlo_doctor.core.errors import InputError
from hlo_doctor.statistics import SampleComparison
from hlo_doctor.verify.checks import check_throughput, ratio
from hlo_doctor.verify.results import Check
from hlo_doctor.verify.rounds import interleaved
from hlo_doctor.verify.settings import ProgressFn
from hlo_doctor.verify.stats import compare_rounds
from hlo_doctor.verify.tpu_inference.results import LevelResult
from hlo_doctor.verify.tpu_inference.settings import TargetSettings

if TYPE_CHECKING:
    from hlo_doctor.fixes.targets import Target

# Metric -> JSON fields tried in order: vllm bench serve / throughput first, then the reference engine's.
DEFAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "throughput": ("output_throughput", "tokens_per_second", "throughput_tok_s"),
    "ttft": ("median_ttft_ms", "mean_ttft_ms", "batch_ttft_ms"),
    "compiles": ("steady_state_compiles",),
    "tokens": ("tokens_sha256",),
}
RECOMPILATION_ENV = "VLLM_XLA_CHECK_RECOMPILATION"
_RECOMPILED = re.compile(r"recompil", re.IGNORECASE)


def parse_metrics(spec: str | None) -> tuple[tuple[str, str], ...]:
    """``throughput=KEY,ttft=KEY,...`` -> pairs; unknown metric names are bad input."""
    if not spec:
        return ()
    pairs = []
    for part in spec.split(","):
        name, sep, key = part.partition("=")
        if not sep or name.strip() not in DEFAULT_FIELDS or not key.strip():
            raise InputError(f"--bench-metrics {spec!r}: cannot read {part!r}",
                             f"write NAME=JSON_KEY pairs separated by commas; names: {', '.join(DEFAULT_FIELDS)}")
        pairs.append((name.strip(), key.strip()))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class BenchRound:
    """One run of the bench command on one tree."""

    label: str
    index: int
    seconds: float
    metrics: dict[str, Any]
    """``throughput``, ``ttft``, ``compiles``, ``tokens`` as found (absent when the JSON lacks them)."""
    compile_note: str = ""


def _fields(mapping: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, ...]]:
    fields = dict(DEFAULT_FIELDS)
    for name, key in mapping:
        fields[name] = (key,)
    return fields


def _lookup(doc: dict[str, Any], key: str) -> object:
    value: object = doc
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _run_bounded(cmd: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``cmd`` through the shell in a session of its own, its output read; None when it (or anything it
    started that still holds its output: a server left in the background) runs past ``timeout`` s. Then
    the whole session is killed, so that no child outlives the round or keeps the pipes open."""
    proc = subprocess.Popen(cmd, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_round(command: str, tree: Target, out: Path, *, label: str, index: int, timeout: float,
              fields: dict[str, tuple[str, ...]]) -> BenchRound:
    """Run the bench command once on ``tree``; an :class:`InputError` naming the round when it cannot be read."""
    where = f"--bench round {index + 1} ({label})"
    cmd = command.replace("{tree}", shlex.quote(str(tree.root))).replace("{out}", shlex.quote(str(out)))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # the trees stay as they are
    tpu = _is_tpu_tree(tree)
    if tpu:
        # The folder that holds the tree's tpu_inference package, first on the path.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree.package_dir.parent), env.get("PYTHONPATH", "")) if p)
        env[RECOMPILATION_ENV] = "1"
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = _run_bounded(cmd, env, timeout)
    if proc is None:
        raise InputError(f"{where} timed out after {timeout:g} s: {cmd}",
                         "raise --bench-timeout or shorten the benchmark")
    seconds = time.perf_counter() - start
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        if _RECOMPILED.search(output):
            # The recompilation check tripped: a step ran off the precompiled menu. That is a finding.
            last = next((ln for ln in reversed(output.strip().splitlines()) if _RECOMPILED.search(ln)), "")
            return BenchRound(label, index, seconds, {"compiles": 1}, last.strip()[:300])
        tail = output.strip().splitlines()[-1][:200] if output.strip() else "no output"
        raise InputError(f"{where} failed with exit {proc.returncode}: {tail}",
                         "run the command by hand with the tree to see why, then fix --bench")
    if not out.is_file():
        raise InputError(f"{where} wrote no JSON at {{out}} ({out})",
                         "make the command write its results to the {out} placeholder (e.g. --output-json {out})")
    try:
        doc = json.loads(out.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} wrote {out}, which is not JSON ({exc.msg})",
                         "make the command write JSON to {out}") from exc
    metrics: dict[str, Any] = {}
    for name, keys in fields.items():
        value = next((v for v in (_lookup(doc, k) for k in keys) if v is not None), None)
        if value is not None:
            metrics[name] = value
    if "throughput" not in metrics:
        raise InputError(f"{where}: no throughput in {out} (tried {', '.join(fields['throughput'])})",
                         "map it with --bench-metrics throughput=JSON_KEY")
    compile_note = ""
    if "compiles" not in metrics and tpu:
        metrics["compiles"] = 0
        compile_note = f"{RECOMPILATION_ENV}=1 and the run succeeded"
    return BenchRound(label, index, seconds, metrics, compile_note)


def _is_tpu_tree(tree: Target) -> bool:
    # Imported here: fixes loads libcst, which a light command never needs.
    from hlo_doctor.fixes.targets import TPU_INFERENCE

    return bool(tree.project == TPU_INFERENCE)


def bench_rounds(settings: TargetSettings, trees: dict[str, Target], work: Path,
                 report: ProgressFn) -> dict[str, list[BenchRound]]:
    """Interleaved rounds (AB BA AB...) of the bench command on both trees (detected targets)."""
    fields = _fields(settings.bench_metrics)
    rounds_n = settings.bench_rounds or settings.rounds
    out: dict[str, list[BenchRound]] = {"baseline": [], "treatment": []}
    folder = work / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    assert settings.bench is not None, "the serving level runs only with --bench"
    for done, label in enumerate(interleaved(rounds_n), start=1):
        index = len(out[label])
        out[label].append(run_round(settings.bench, trees[label], folder / f"{label}-{index + 1}.json",
                                    label=label, index=index, timeout=settings.bench_timeout, fields=fields))
        report("bench rounds", done, 2 * rounds_n)
    return out


def serving_checks(settings: TargetSettings,
                   rounds: dict[str, list[BenchRound]]) -> tuple[tuple[Check, ...], SampleComparison | None]:
    """Checks 1, 2, 3 (when the JSON carries tokens) and 5 from the bench rounds; and the throughput comparison."""
    b, t = rounds["baseline"], rounds["treatment"]
    checks: list[Check] = []
    if all("compiles" in r.metrics for r in b + t):
        bad = [f"{r.label} round {r.index + 1}: {r.metrics['compiles']}" + (f" ({r.compile_note})" if r.compile_note
                                                                         and r.metrics["compiles"] else "")
               for r in t + b if r.metrics["compiles"]]
        total = {k: sum(int(r.metrics["compiles"]) for r in v) for k, v in rounds.items()}
        figure = f"treatment {total['treatment']}, baseline {total['baseline']}"
        checks.append(Check(1, "steady-state compiles", not bad, figure, " | ".join(bad)))
    else:
        checks.append(Check(1, "steady-state compiles", False, "not run: the bench JSON has no compile count",
                            "map one with --bench-metrics compiles=KEY, or run a tpu-inference tree (its "
                            f"recompilation check, {RECOMPILATION_ENV}=1, is then on)"))
    failed_runs = [r for r in b + t if "throughput" not in r.metrics]
    if failed_runs:
        why = f"{len(failed_runs)} round(s) stopped by the recompilation check: no figures"
        checks.append(Check(2, "batch TTFT ratio", False, f"not run: {why}", ""))
        checks.append(Check(5, "throughput verdict", False, f"not run: {why}", ""))
        return tuple(checks), None
    if all("ttft" in r.metrics for r in b + t):
        tm = float(np.median([float(r.metrics["ttft"]) for r in t]))
        bm = float(np.median([float(r.metrics["ttft"]) for r in b]))
        x = ratio(tm, bm)
        checks.append(Check(2, "batch TTFT ratio", x <= settings.ttft_bound,
                            f"x{x:.2f} median (bound {settings.ttft_bound:.2f})", f"median {tm:.1f} vs {bm:.1f} ms"))
    else:
        checks.append(Check(2, "batch TTFT ratio", False, "not run: the bench JSON has no TTFT",
                            "map it with --bench-metrics ttft=KEY"))
    if all("tokens" in r.metrics for r in b + t):
        differ = [i + 1 for i, (x, y) in enumerate(zip(b, t, strict=False)) if x.metrics["tokens"] != y.metrics["tokens"]]
        checks.append(Check(3, "greedy tokens identical", not differ,
                            f"tokens differ in rounds {differ}" if differ else f"identical in {len(b)}/{len(b)} rounds",
                            ""))
    # One figure per round (a serving benchmark gives no per-step times): each round its own block,
    # compared within the AB/BA pair it ran in, as check 5 of every other kind compares its rounds.
    throughput = compare_rounds(settings, [[float(r.metrics["throughput"])] for r in b],
                                [[float(r.metrics["throughput"])] for r in t], lower_is_better=False)
    wall = compare_rounds(settings, [[r.seconds] for r in b], [[r.seconds] for r in t])
    checks.append(check_throughput(throughput, wall, False, second="run wall time"))
    return tuple(checks), throughput


def serving_level(settings: TargetSettings, baseline: Target, treatment: Target, work: Path,
                  report: ProgressFn) -> LevelResult:
    """The serving level as a :class:`LevelResult` (its HLO check is the program level's, which runs
    first in the same report)."""
    rounds = bench_rounds(settings, {"baseline": baseline, "treatment": treatment}, work, report)
    checks, throughput = serving_checks(settings, rounds)
    figures: dict[str, Any] = {k: [{"seconds": r.seconds, **r.metrics, "compile_note": r.compile_note} for r in v]
                               for k, v in rounds.items()}
    return LevelResult("serving", tuple(sorted(checks, key=lambda c: c.number)), throughput, figures)
