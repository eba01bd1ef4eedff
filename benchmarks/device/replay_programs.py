"""Every program of a capture compiled again from its own HLO and run alone on this machine's device.

For each module the capture's xplane holds (its optimized ``HloModuleProto``), the replay's own
machinery (``lint/replay``: ``module_text``, portable StableHLO for a PJRT plugin, the child's
compile and random inputs) builds it, runs it ``--repeats`` times after a warm-up, and prints its
time per run beside the capture's own device time per run of that program (its ops' time per step
over its runs per step). A program that does not import or compile prints XLA's one line. On the
capture's chip this judges the replay's import (what compiles again) and its stand (a program's
time alone against its ops' time in the capture; the replay adds the dispatch the op stats leave
out). ``--platform cpu`` compiles an accelerator capture's programs on XLA:CPU instead (a dry run:
times there are not the chip's).

Usage::

    python benchmarks/device/replay_programs.py CAPTURE [CAPTURE ...] [--repeats 200] [--platform P]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _once(exe: Any, args: list[Any], carried: list[tuple[int, int]]) -> None:
    """One run of ``exe`` waited for; each donated parameter in ``args`` takes its aliased output."""
    import jax

    outs = exe.run(list(args))
    for out, param in carried:
        args[param] = outs[out]
    jax.block_until_ready(outs)


def programs(capture: Path, repeats: int, platform: str | None) -> list[dict[str, Any]]:
    import jax
    import numpy as np
    from jax._src.lib import xla_client as xc

    from hlo_doctor.hlo.proto import module_proto_bytes
    from hlo_doctor.lint import load_context
    from hlo_doctor.lint.replay.child import ReplayError, _compile, _inputs
    from hlo_doctor.lint.replay.launch import _PLATFORMS
    from hlo_doctor.lint.replay.plan import _call, module_key, proto_name, runs_per_step
    from hlo_doctor.trace.read import find_xplanes, read_module_protos

    ctx = load_context(capture)
    where = platform or _PLATFORMS.get(ctx.backend, (ctx.backend,))[0]
    device = jax.devices(where)[0]
    protos = {(p.name, p.program_id): module_proto_bytes(p.hlo_proto)
              for p in read_module_protos(find_xplanes(capture)[0])}
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for m in ctx.modules:
            raw = protos.get((m.name, m.program_id))
            row: dict[str, Any] = {"capture": capture.name, "module": module_key(m), "device": device.device_kind,
                                   "capture_device": ctx.device_kind}
            rows.append(row)
            if raw is None:
                row["error"] = "the capture holds no HLO proto of it"
                continue
            (folder / proto_name(m)).write_bytes(raw)
            per_step = runs_per_step(ctx, m)
            table = ctx.module_rows(m)
            step_us = float(table["time_per_step_us"].fillna(0).sum()) if table is not None and len(table) else 0.0
            row["capture_us_per_run"] = step_us / per_step if per_step else None
            call = _call(ctx, m, {})
            # A donated parameter is gone after a run: the next run takes the output aliased to it.
            carried = [(int(out.strip("{}").split(",")[0] or 0), param) for out, param in m.input_output_alias]

            t0 = time.perf_counter()
            try:
                exe, _, _ = _compile(call, folder, device.client, xc.DeviceList((device,)), device.platform != "cpu")
                args = _inputs(call, rng, device)
                _once(exe, args, carried)
            except (ReplayError, Exception) as exc:  # noqa: BLE001 - XLA's message is the row
                row["error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                continue
            row["compile_s"] = round(time.perf_counter() - t0, 3)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                _once(exe, args, carried)
                times.append((time.perf_counter() - t) * 1e6)
            row["replay_us_per_run"] = statistics.median(times)
            row["replay_iqr_us"] = [float(np.percentile(times, 25)), float(np.percentile(times, 75))]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| capture | program | capture's device time per run (us) | replayed alone, median per run (us) [IQR] "
           "| replay / capture | compile s |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        cap = r.get("capture_us_per_run")
        if "error" in r:
            out.append(f"| {r['capture']} | {r['module']} | {cap or 0:,.1f} | not replayed: {r['error']} | | |")
            continue
        rep = r["replay_us_per_run"]
        ratio = f"{rep / cap:.2f}" if cap else "-"
        out.append(f"| {r['capture']} | {r['module']} | {cap or 0:,.1f} | {rep:,.1f} "
                   f"[{r['replay_iqr_us'][0]:,.1f}, {r['replay_iqr_us'][1]:,.1f}] | {ratio} | {r['compile_s']} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--platform", default=None, help="jax platform to run on (default: the capture's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = [r for c in args.captures for r in programs(c, args.repeats, args.platform)]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
