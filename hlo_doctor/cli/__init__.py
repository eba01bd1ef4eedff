"""The ``hlo-doctor`` command line: a click group; each command lives in its own module here.

Only this package prints. Exit codes: see :class:`hlo_doctor.core.errors.ExitCode`.
"""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import click

from hlo_doctor import __version__
from hlo_doctor.cli import apply_fix as _apply_fix
from hlo_doctor.cli import diagnose as _diagnose
from hlo_doctor.cli import doctor as _doctor
from hlo_doctor.cli import engine as _engine
from hlo_doctor.cli import gate as _gate
from hlo_doctor.cli import mcp as _mcp
from hlo_doctor.cli import memory as _memory
from hlo_doctor.cli import profile as _profile
from hlo_doctor.cli import report as _report
from hlo_doctor.cli import rules as _rules
from hlo_doctor.cli import verify as _verify
from hlo_doctor.cli.common import examples, fail
from hlo_doctor.cli.config import default_map
from hlo_doctor.core.errors import HloDoctorError


def _events_reader() -> str:
    """Which reader decodes an xplane's events, and which other compiled passes the install has, said
    without importing them (``--version`` stays light)."""
    package = Path(__file__).resolve().parents[1]

    def built(module: str) -> bool:
        return any((package / f"{module}{suffix}").is_file() for suffix in EXTENSION_SUFFIXES)
    if os.environ.get("HLO_DOCTOR_NUMPY_READER"):
        return "xplane events: numpy reader (HLO_DOCTOR_NUMPY_READER is set)"
    if not built("trace/_xwire"):
        return "xplane events: numpy reader (the compiled one was not built: no C compiler at install)"
    also = [what for what, module in (("op sums", "opstats/_xsums"), ("host threads' walk", "trace/_xsegments"))
            if built(module)]
    return "xplane events: compiled reader" + (f" (compiled too: {', '.join(also)})" if also else "")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=examples(
                 "hlo-doctor profile --out runs/decode && hlo-doctor diagnose runs/decode",
                 "hlo-doctor gate baseline/ runs/decode --format junit -o gate.xml",
                 'eval "$(_HLO_DOCTOR_COMPLETE=bash_source hlo-doctor)"   # shell completion (README)',
             ))
@click.version_option(__version__, prog_name="hlo-doctor", message=f"%(prog)s, version %(version)s\n{_events_reader()}")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find, fix and gate wasted work in the compiled (HLO) programs of JAX serving stacks.

    Defaults for commands' options can live in [tool.hlo-doctor] of pyproject.toml (docs/cli.md).

    \b
    Exit codes: 0 clean / passed, 1 findings or regression remain (gates),
                2 usage or input error, 3 internal error.
    """
    if ctx.resilient_parsing:  # shell completion: never fail on the project's settings
        return
    try:
        ctx.default_map = default_map(Path.cwd())
    except HloDoctorError as exc:
        fail(exc)


for _module in (_profile, _diagnose, _apply_fix, _verify, _gate, _rules, _engine, _doctor, _report, _memory, _mcp):
    for _cmd in _module.COMMANDS:
        main.add_command(_cmd)
