"""CLI: ``engine run`` (an offline batch on the reference decode engine, or on a copy of its tree)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from hlo_doctor.cli.common import console, examples, handle_errors, output_option, print_wide, write_output
from hlo_doctor.cli.progress import progress_bars
from hlo_doctor.core.errors import ExitCode, HloDoctorError

_STAGES = {"warmup": "warm-up (parameters + precompiled menu)", "precompile": "precompile (programs)",
           "prefill": "prefill", "decode": "decode"}


JSON_SCHEMA = "hlo-doctor.engine-run/1"


@click.group("engine", epilog=examples("hlo-doctor engine run --batch 8 --max-tokens 32"))
def engine_group() -> None:
    """The bundled reference decode engine (a Gemma-shaped JAX decoder served like tpu-inference)."""


@engine_group.command("run", epilog=examples(
    "hlo-doctor engine run --batch 8 --max-tokens 32",
    "hlo-doctor engine run --check-recompilation --format json -o run.json",
))
@click.option("--batch", type=int, default=64, show_default=True, help="Requests in the offline batch.")
@click.option("--max-tokens", type=int, default=16, show_default=True, help="Tokens generated per request.")
@click.option("--vocab", "vocab_size", type=int, default=256000, show_default=True, help="Vocabulary size.")
@click.option("--prompt-len", type=int, default=16, show_default=True, help="Prompt tokens per request.")
@click.option("--hidden", "hidden_size", type=int, default=256, show_default=True, help="Hidden size.")
@click.option("--layers", "num_layers", type=int, default=2, show_default=True, help="Decoder layers.")
@click.option("--max-num-reqs", type=int, default=64, show_default=True,
              help="Largest num_reqs bucket of the precompiled menu (buckets: 8, 16, ... up to it).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of parameters and prompts.")
@click.option("--sampling/--greedy", "do_sampling", default=False, show_default=True,
              help="Sample with temperature/top-k/top-p instead of greedy argmax.")
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--top-k", type=int, default=20, show_default=True, help="0 disables top-k.")
@click.option("--top-p", type=float, default=0.8, show_default=True, help="1.0 disables top-p.")
@click.option("--logprobs/--no-logprobs", default=False, show_default=True,
              help="Gather f32 logprobs of every generated token.")
@click.option("--check-recompilation", is_flag=True, default=False,
              help="Fail (exit 1) when the sampler compiles after warm-up (also HLO_DOCTOR_CHECK_RECOMPILATION=1).")
@click.option("--engine", "engine_path", type=click.Path(path_type=Path), default=None,
              help="Engine source tree to run (default: the bundled engine).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table: rich summary on stderr; json: machine output.")
@output_option("Write the json to FILE instead of stdout ('-': stdout).")
@handle_errors
def run_cmd(engine_path: Path | None, fmt: str, output: Path | None, check_recompilation: bool,
            **fields: Any) -> None:
    """Prefill a batch of seeded prompts, decode --max-tokens tokens, report the serving figures.

    \b
    Figures: throughput (generated tok/s over prefill + decode), batch TTFT (prefill until the
    first tokens are on the host), TPOT (mean decode step), and the compiles after warm-up
    (any compile there means a call missed the precompiled menu; JAX's reason is shown).
    Exit codes: 0 ran, 1 --check-recompilation tripped, 2 impossible configuration.
    """
    # Imported here, not with the module: the engine loader imports numpy; the engine, JAX.
    from hlo_doctor.engines import checked_config, engine_source_dir, load_engine

    engine = load_engine(engine_path)
    if check_recompilation:
        fields["check_recompilation"] = True
    config = checked_config(engine, **fields)
    try:
        with progress_bars(_STAGES) as progress:
            result = engine.run_offline_batch(config, progress=progress)
    except engine.RecompilationError as exc:
        raise HloDoctorError(f"recompilation after warm-up: {exc}",
                             "the precompiled menu does not match what the runner passes",
                             exit_code=ExitCode.FINDINGS) from exc
    summary = result.summary()
    summary["engine_source"] = str(engine_source_dir(engine))
    if fmt == "json":
        write_output(json.dumps({"schema": JSON_SCHEMA, **summary}, indent=1) + "\n", output)
        return
    _render(summary)


def _render(summary: dict[str, Any]) -> None:
    from rich.table import Table

    config = summary["config"]
    mode = "sampling" if config["do_sampling"] else "greedy"
    console.print(f"[bold]engine run[/] {escape(str(summary['engine_source']))}", soft_wrap=True)
    console.print(f"batch {config['batch']} · {config['max_tokens']} tokens · vocab {config['vocab_size']:,} · "
                  f"hidden {config['hidden_size']} · {config['num_layers']} layers · {mode}"
                  + (" · logprobs" if config["logprobs"] else ""))
    table = Table(show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("throughput", f"{summary['throughput_tok_s']:,.1f} tok/s")
    table.add_row("batch TTFT", f"{summary['batch_ttft_ms']:,.1f} ms")
    table.add_row("TPOT (mean decode step)", f"{summary['tpot_ms']:,.1f} ms")
    if summary["median_step_ms"] is not None:
        table.add_row("median decode step", f"{summary['median_step_ms']:,.1f} ms")
    table.add_row("warm-up", f"{summary['warmup_s']:,.1f} s")
    compiles = summary["steady_state_compiles"]
    table.add_row("compiles after warm-up", f"[red]{compiles}[/]" if compiles else "0")
    table.add_row("tokens sha256", summary["tokens_sha256"][:16])
    if summary["mean_logprob"] is not None:
        table.add_row("mean logprob", f"{summary['mean_logprob']:.4f}")
    print_wide(table)
    for reason in summary["compile_reasons"]:
        console.print(f"[red]compile:[/] {escape(str(reason))}", soft_wrap=True)


COMMANDS = [engine_group]
