"""Time and peak memory to build the op-stats table: hlo-doctor vs xprof's own conversions.

For one small and one large (>= 50 MB) XLA:CPU trace, each measurement runs in its own subprocess
(so peak RSS is that conversion's alone):

- ``hlo-doctor``: ``load_opstats(xplane)`` (events, steps, HLO modules, the table);
- ``xprof trace_viewer``: ``xspace_to_tool_data([xplane], "trace_viewer", {})``;
- ``xprof hlo_stats``: ``xspace_to_tool_data([xplane], "hlo_stats", {})`` (empty on CPU traces: it is
  timed anyway, as the conversion xprof would run).

xprof converts a copy of the xplane in a temporary directory (it writes cache files beside its input).

Usage::

    python benchmarks/bench_opstats.py [--workdir DIR] [--large-mb 50] [--repeat 3]

The traces are generated into ``--workdir`` (default: a temporary directory) and never committed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def _generate(out: Path, *, layers: int, steps: int) -> Path:
    """Profile ``steps`` steps of a program with ``layers`` small matmul layers; return the xplane."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x: jax.Array, ws: jax.Array) -> jax.Array:
        # Weights are arguments (not constants), so the HLO protos stay small; each layer is a dot
        # plus a fusion: two op events per layer per step.
        for i in range(layers):
            x = jnp.tanh(x @ ws[i])
        return x

    x = jnp.ones((8, 32), jnp.float32)
    ws = jnp.ones((layers, 32, 32), jnp.float32) * 0.01
    jax.block_until_ready(step(x, ws))
    jax.profiler.start_trace(str(out))
    try:
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("decode", step_num=i):
                jax.block_until_ready(step(x, ws))
    finally:
        jax.profiler.stop_trace()
    return next(out.glob("plugins/profile/*/*.xplane.pb"))


def _vm(field: str) -> float:
    """A /proc/self/status figure in MiB (VmHWM: peak RSS of this process since exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    # Not Linux: ru_maxrss is the closest (it is not reset by exec, hence the subprocess per run).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(tool: str, xplane: Path) -> dict[str, float]:
    """Run one conversion in this process; return seconds and peak RSS (MiB).

    Both sides import what they need before the clock starts (jax and XLA's HLO printer for
    hlo-doctor; xprof's converter for xprof).
    """
    rows = -1
    if tool == "hlo-doctor":
        import jax.profiler  # noqa: F401 - imported before timing, like xprof's converter below
        from jax._src.lib import xla_client  # noqa: F401

        from hlo_doctor.opstats import load_opstats

        base = _vm("VmRSS")
        t0 = time.perf_counter()
        stats = load_opstats(xplane)
        seconds = time.perf_counter() - t0
        rows = len(stats.table)
    else:
        from xprof.convert import raw_to_tool_data

        name = tool.split()[-1]
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / xplane.name
            shutil.copy(xplane, copy)
            base = _vm("VmRSS")
            t0 = time.perf_counter()
            data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], name, {})
            seconds = time.perf_counter() - t0
        if name == "hlo_stats" and isinstance(data, (str, bytes)) and data:
            rows = len(json.loads(data).get("rows", []) or [])
    return {"seconds": seconds, "peak_rss_mib": _vm("VmHWM"), "rss_before_mib": base, "rows": rows}


def _generate_in_child(out: Path, *, layers: int, steps: int) -> Path:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, str(HERE), "--generate", str(out), str(layers), str(steps)],
                          env=env, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def _run_child(tool: str, xplane: Path) -> dict[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, str(HERE), "--child", tool, str(xplane)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--large-mb", type=float, default=50.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool on the small trace (best kept)")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "XPLANE"), help=argparse.SUPPRESS)
    parser.add_argument("--generate", nargs=3, metavar=("OUT", "LAYERS", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.child[0], Path(args.child[1]))))
        return
    if args.generate:
        out, layers, steps = args.generate
        print(_generate(Path(out), layers=int(layers), steps=int(steps)))
        return

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="hlo-doctor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    small = _generate_in_child(work / "small", layers=8, steps=10)
    # About 3 op events per layer per step: grow the step count until the trace is large enough.
    large_dir = work / "large"
    steps = 1200
    while True:
        shutil.rmtree(large_dir, ignore_errors=True)
        large = _generate_in_child(large_dir, layers=120, steps=steps)
        size_mb = large.stat().st_size / 2**20
        if size_mb >= args.large_mb:
            break
        steps = int(steps * args.large_mb / max(size_mb, 1.0) * 1.1) + 1

    tools = ["hlo-doctor", "xprof trace_viewer", "xprof hlo_stats"]
    results: list[dict[str, object]] = []
    for label, xplane, repeat in (("small", small, args.repeat), ("large", large, 1)):
        size = xplane.stat().st_size / 2**20
        for tool in tools:
            runs = [_run_child(tool, xplane) for _ in range(repeat)]
            best = min(runs, key=lambda r: r["seconds"])
            results.append({"trace": label, "size_mib": round(size, 2), "tool": tool, **best})

    print(f"{'trace':6} {'size MiB':>9} {'tool':20} {'seconds':>9} {'peak RSS MiB':>13} {'RSS growth':>11} "
          f"{'rows':>6} {'time / hlo-doctor':>18}")
    for r in results:
        ours = next(x for x in results if x["trace"] == r["trace"] and x["tool"] == "hlo-doctor")
        ratio = float(r["seconds"]) / float(ours["seconds"])  # type: ignore[arg-type]
        growth = float(r["peak_rss_mib"]) - float(r["rss_before_mib"])  # type: ignore[arg-type]
        print(f"{r['trace']:6} {r['size_mib']:>9} {r['tool']:20} {float(r['seconds']):>9.2f} "  # type: ignore[arg-type]
              f"{float(r['peak_rss_mib']):>13.0f} {growth:>11.0f} {r['rows']:>6} {ratio:>18.2f}")  # type: ignore[arg-type]
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"traces and results.json in {work}")


if __name__ == "__main__":
    main()
