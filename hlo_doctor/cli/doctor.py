"""CLI: ``hlo-doctor doctor``: profile -> diagnose -> apply-fix (on a copy) -> verify -> report, in one go."""

from __future__ import annotations

from pathlib import Path

import click

from hlo_doctor.cli.common import examples, handle_errors, print_wide
from hlo_doctor.cli.progress import progress_bars
from hlo_doctor.render.registry import DOCTOR

# verify's defaults, as the verify core defines them (tests/cli/test_cold_start.py holds them equal):
# written here so that --help does not import the core (numpy, scipy, the engine).
DEFAULT_ROUNDS, DEFAULT_MAX_TOKENS, DEFAULT_TTFT_BOUND = 6, 16, 1.25


@click.command("doctor", epilog=examples(
    "hlo-doctor doctor                                      # profile, diagnose, fix a copy, verify: runs/doctor",
    "hlo-doctor doctor --engine ~/src/engine --out runs/doctor-mine --rounds 5",
))
@click.option("--engine", type=click.Path(path_type=Path), help="Engine source tree [default: the bundled "
              "reference engine]. It is never modified: the fix goes to a copy.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("runs/doctor"), show_default=True,
              help="Folder for every artifact (replaced only if it holds an earlier doctor run).")
@click.option("--variant", type=click.Choice(["full", "upstream"]), default="full", show_default=True,
              help="Variant of the fix to apply and verify.")
@click.option("--rounds", type=int, default=DEFAULT_ROUNDS, show_default=True, help="Measured rounds per variant.")
@click.option("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Tokens per request in each measured round.")
@click.option("--batch", type=int, help="Requests per batch [default: the engine's, 64].")
@click.option("--vocab", type=int, help="Vocabulary size [default: the engine's, 256000].")
@click.option("--ttft-bound", type=float, default=DEFAULT_TTFT_BOUND, show_default=True,
              help="Largest allowed batch TTFT ratio treatment/baseline (verify's check 2).")
@click.option("--steps", "profile_steps", type=int, default=5, show_default=True, help="Decode steps profiled.")
@handle_errors
def doctor_cmd(engine: Path | None, out_dir: Path, variant: str, rounds: int, max_tokens: int, batch: int | None,
               vocab: int | None, ttft_bound: float, profile_steps: int) -> None:
    """Run the whole loop on the engine and write every artifact (and report.md) to --out.

    \b
    profile   capture decode steps of the engine (run directory: profile/)
    diagnose  apply hlo-doctor's rules (diagnose.json, diagnose.md)
    apply-fix the bundled fix for what was found, on a copy (fix.diff, treatment-engine/)
    verify    same-session interleaved A/B with the five checks (verify.json, verify.md)
    report    report.md: what was found, what the fix changed, what it measured, the verdict

    \b
    Exit codes: 0 verified (or nothing found), 1 a check failed or findings without a fix, 2 bad input.
    """
    from hlo_doctor.doctor import DoctorSettings, run_doctor

    settings = DoctorSettings(engine=engine, out_dir=out_dir, variant=variant, rounds=rounds,
                              max_tokens=max_tokens, batch=batch, vocab=vocab, profile_steps=profile_steps,
                              ttft_bound=ttft_bound)
    with progress_bars(keep=True, label_width=34) as progress:
        result = run_doctor(settings, progress=progress)
    print_wide(DOCTOR.render("table", result))
    raise SystemExit(int(result.exit_code))


COMMANDS = [doctor_cmd]
