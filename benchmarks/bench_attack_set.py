"""The attack set's figures: each case's exit code, wall time and peak RSS, for one or two checkouts.

    python benchmarks/bench_attack_set.py                       # this checkout
    python benchmarks/bench_attack_set.py --before ../other     # another checkout's code on the same inputs

A case passes when the common judge and its own check accept the result (``tests/security/attack_set.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests" / "security"))

from attack_cases import MORE_CASES  # noqa: E402
from attack_set import CASES, RUN, SCHEDULER_CASES, common_judge, fake_scheduler, run_case  # noqa: E402


def _judge(outcome: object, check: object, folder: Path) -> str:
    try:
        common_judge(outcome)  # type: ignore[arg-type]
        check(outcome, folder)  # type: ignore[operator]
    except AssertionError as exc:
        return "FAIL " + str(exc).splitlines()[0][:60] if str(exc) else "FAIL"
    except Exception as exc:  # noqa: BLE001 - an output missing, unreadable: the case failed
        return f"FAIL {type(exc).__name__}"
    return "ok"


def _row(repo: Path, case: object) -> tuple[str, str, str, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args, check = case.build(folder)  # type: ignore[attr-defined]
        o = run_case(args, cwd=folder, repo=repo, timeout=case.deadline_s,  # type: ignore[attr-defined]
                     address_space=case.address_space)  # type: ignore[attr-defined]
        verdict = _judge(o, check, folder)
    rc = "hang" if o.rc is None else str(o.rc)
    return rc, f"{o.seconds:.1f}", f"{o.rss_mib:.0f}", verdict, ""


def _scheduler_row(repo: Path, mode: str) -> tuple[str, str, str, str, str]:
    with tempfile.TemporaryDirectory() as tmp, fake_scheduler(mode) as address:
        o = run_case(["stats", str(RUN), "--scheduler", address], cwd=Path(tmp), repo=repo, timeout=60)
    ok = o.rc == 2 and o.seconds < 35 and "Traceback" not in o.stderr
    return ("hang" if o.rc is None else str(o.rc)), f"{o.seconds:.1f}", f"{o.rss_mib:.0f}", ("ok" if ok else "FAIL"), ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout, run on the same inputs first")
    parser.add_argument("--only", help="only the cases whose 'surface: name' holds this text")
    ns = parser.parse_args()
    repos = ([("before", ns.before.resolve())] if ns.before else []) + [("after", HERE)]
    print("| surface | case | " + " | ".join(f"{n} exit | {n} s | {n} MiB | {n}" for n, _ in repos) + " |")
    print("|---|---|" + "---:|---:|---:|---|" * len(repos))
    parser_only = ns.only.lower() if ns.only else ""
    items = [(c.surface, c.name, lambda r, c=c: _row(r, c)) for c in CASES + MORE_CASES
             if parser_only in f"{c.surface}: {c.name}".lower()]
    items += [("deadlines", f"--scheduler {m}", lambda r, m=m: _scheduler_row(r, m)) for m in SCHEDULER_CASES
              if parser_only in f"deadlines: --scheduler {m}"]
    for surface, name, fn in items:
        cells = []
        for _, repo in repos:
            rc, s, mib, verdict, _ = fn(repo)
            cells += [rc, s, mib, verdict]
        print(f"| {surface} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
