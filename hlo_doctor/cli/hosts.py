"""The options of the commands that read captures of several host files: ``--jobs``,
``--scheduler`` (default: ``scheduler`` in ``[tool.hlo-doctor]``) and ``--skip-bad-hosts``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hlo_doctor.core.escape.terminal import term

if TYPE_CHECKING:
    from hlo_doctor.hosts import PodOptions

F = TypeVar("F", bound=Callable[..., Any])


def host_options(func: F) -> F:
    """Add ``--jobs``, ``--scheduler`` and ``--skip-bad-hosts`` to a command."""
    for option in reversed((
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Host files read at once, each in its own worker process (a log directory of "
                          "several hosts); 1: one after another in this process.  [default: the cores "
                          "available]"),
        click.option("--scheduler", metavar="ADDRESS", default=None,
                     help="Read the host files on the Dask cluster whose scheduler is at ADDRESS "
                          "(tcp://host:8786; needs hlo-doctor[distributed]); default: 'scheduler' in "
                          "[tool.hlo-doctor]."),
        click.option("--skip-bad-hosts", is_flag=True,
                     help="Leave out a host file that cannot be read (the table says so) instead of "
                          "exiting 2."),
        click.option("--host-timeout", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
                     expose_value=False, callback=_remember_host_timeout,
                     help="How long a worker (local or Dask) may read one host file before it counts as "
                          "lost: a local worker is killed and the file given to another once, then named "
                          "(exit 2, or left out with --skip-bad-hosts).  [default: 600]"),
    )):
        func = option(func)
    return func


_HOST_TIMEOUT = "hlo_doctor.host_timeout_s"


def _remember_host_timeout(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    if value is not None:
        ctx.meta[_HOST_TIMEOUT] = value


def pod_options(jobs: int | None, scheduler: str | None, skip_bad_hosts: bool) -> PodOptions:
    """The :class:`PodOptions` the flags ask for."""
    # Here, not at the top: the host readers import the op-stats table's libraries (pandas).
    from hlo_doctor.hosts import PodOptions, cores_available
    from hlo_doctor.hosts.local import HOST_TIMEOUT_S

    ctx = click.get_current_context(silent=True)
    timeout = ctx.meta.get(_HOST_TIMEOUT, HOST_TIMEOUT_S) if ctx is not None else HOST_TIMEOUT_S
    return PodOptions(jobs=jobs if jobs is not None else cores_available(), scheduler=scheduler or None,
                      skip_bad_hosts=skip_bad_hosts, host_timeout_s=float(timeout))


def left_out_note(left_out: list[tuple[str, str]] | tuple[tuple[str, str], ...], side: str = "") -> str:
    """One line naming the host files a command's input left out (``--skip-bad-hosts``)."""
    files = "; ".join(f"{why}" if path in why else f"{path}: {why}" for path, why in left_out)
    return term(f"{side}{len(left_out)} host file(s) left out (--skip-bad-hosts), the results cover the others only: "
                f"{files}")
