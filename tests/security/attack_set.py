"""The attack set (helpers, not tests): every hostile case as one real CLI process, with its judge.

Each case builds its inputs in a folder of its own and names the command line; :func:`run_case` runs it
as a separate process (this checkout, or another one: ``repo``) under a deadline and measures its exit
code, wall time and peak RSS (``wait4``). The common judge holds for every case: exit 2 with one
``error:`` line, or a bounded result the case's own check accepts; never exit 3, a traceback, a
signal or a run past the deadline. ``test_attack_set.py`` runs them; ``benchmarks/bench_attack_set.py``
prints the figures for two checkouts side by side.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.dom import minidom

from hostile import NAME, hostile_exports, hostile_hlo

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "sample_traces" / "engine_b64_original_a"
OTHER = REPO / "sample_traces" / "engine_b64_original_b"
MAIN = "import sys; from hlo_doctor.cli import main; sys.argv[0] = 'hlo-doctor'; main()"
HAZARD = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one run did."""

    rc: int | None
    """Exit status; negative for a signal; None when it ran past the deadline (killed)."""
    seconds: float
    rss_mib: float
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class Case:
    """One hostile input: ``build(folder) -> (args, check)``; ``check(outcome, folder)`` raises
    AssertionError when the result is wrong (beyond the common judge)."""

    surface: str
    name: str
    build: Callable[[Path], tuple[list[str], Callable[[Outcome, Path], None]]]
    deadline_s: float = 90.0
    address_space: int | None = None
    """Run under this ``RLIMIT_AS`` (bytes)."""


def run_case(args: list[str], *, cwd: Path, repo: Path = REPO, timeout: float = 90.0,
             address_space: int | None = None, env: dict[str, str] | None = None) -> Outcome:
    """``hlo-doctor ARGS`` from ``repo`` as its own process; killed at ``timeout``; ``address_space``:
    under that ``RLIMIT_AS`` (bytes, util-linux's ``prlimit``); ``env``: settings added to its environment."""
    env = {**os.environ, "PYTHONPATH": str(repo), "JAX_PLATFORMS": "cpu", "COLUMNS": "200", "GITHUB_ACTIONS": "",
           "XDG_CACHE_HOME": str(cwd / "cache"), **(env or {})}
    out, err, rss = cwd / ".stdout", cwd / ".stderr", cwd / ".rss"
    # GNU time measures the command's own peak RSS: a child forked from this process would start its
    # high-water mark at this process's size (Linux keeps it across exec).
    timer = ["/usr/bin/time", "-f", "%M", "-o", str(rss)] if os.access("/usr/bin/time", os.X_OK) else []
    start = time.monotonic()
    with out.open("wb") as o, err.open("wb") as e:
        import subprocess

        limit = ["prlimit", f"--as={address_space}:unlimited", "--"] if address_space else []
        proc = subprocess.Popen([*timer, *limit, sys.executable, "-c", MAIN, *args], cwd=cwd, env=env, stdout=o, stderr=e,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        rc: int | None = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = rc if rc is not None else -9
    seconds = time.monotonic() - start
    peak_kib = float(usage.ru_maxrss)
    if timer and rss.exists():
        lines = [x for x in rss.read_text().split() if x.isdigit()]
        peak_kib = float(lines[-1]) if lines else peak_kib
    if timer and rss.exists() and rc is not None and rc >= 128 and "terminated by signal" in rss.read_text():
        rc = -(rc - 128)  # time reports a signal as 128 + its number
    return Outcome(rc, seconds, peak_kib / 1024, out.read_text(errors="replace"),
                   err.read_text(errors="replace"))


def common_judge(o: Outcome) -> None:
    """Exit 2 with one line, or 0/1; never 3, a traceback, a signal or the deadline."""
    assert o.rc is not None, "ran past its deadline"
    assert o.rc in (0, 1, 2), f"exit {o.rc}"
    assert "Traceback" not in o.stderr and "internal error" not in o.stderr, o.stderr[-1500:]
    if o.rc == 2:
        errors = [line for line in o.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, o.stderr[-1500:]


# -- judges of the outputs --------------------------------------------------------------------------

_OURS = re.compile(r"^::(error|warning|notice)( (file|line|title)=[^,:]*(,(file|line|title)=[^,:]*)*)?::")


def _no_attacker_lines(o: Outcome, _folder: Path) -> None:
    for line in re.split(r"[\r\n]", o.stdout + "\n" + o.stderr):
        if line.startswith("::"):
            assert _OURS.match(line), line
            title = re.search(r"title=([^,:]*)", line)
            assert title is None or title.group(1).startswith(("HD", "hlo-doctor")), line
    assert not HAZARD.search(o.stdout + o.stderr), repr(HAZARD.search(o.stdout + o.stderr))


def _markdown_clean(text: str) -> None:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    for t in md.parse(text):
        for c in [t, *(t.children or [])]:
            if c.type in ("html_inline", "html_block"):
                assert c.content.strip() in ("<sub>", "</sub>", "<details><summary>Policy</summary>",
                                             "</details>"), c.content
    assert not HAZARD.search(text)


def _md_out(o: Outcome, folder: Path) -> None:
    _markdown_clean(o.stdout)


def _junit(path: str) -> Callable[[Outcome, Path], None]:
    def check(o: Outcome, folder: Path) -> None:
        doc = minidom.parseString((folder / path).read_bytes())
        for node in doc.getElementsByTagName("testcase"):
            assert not HAZARD.search(node.getAttribute("name"))
    return check


def _html(path: str) -> Callable[[Outcome, Path], None]:
    def check(o: Outcome, folder: Path) -> None:
        text = (folder / path).read_text()
        assert "<img src=x" not in text and "<script>alert" not in text
        assert "script-src &#x27;sha256-" in text
    return check


def _csv(o: Outcome, _folder: Path) -> None:
    for row in csv.reader(io.StringIO(o.stdout)):
        for cell in row:
            try:
                float(cell)
            except ValueError:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
            assert not HAZARD.search(cell)


def _exit(code: int, *words: str) -> Callable[[Outcome, Path], None]:
    def check(o: Outcome, _folder: Path) -> None:
        assert o.rc == code, (o.rc, o.stderr[-800:])
        for w in words:
            assert w in o.stderr, o.stderr[-800:]
    return check


def _and(*checks: Callable[[Outcome, Path], None]) -> Callable[[Outcome, Path], None]:
    def check(o: Outcome, folder: Path) -> None:
        for c in checks:
            c(o, folder)
    return check


# -- builders -------------------------------------------------------------------------------------

def _hlo(fmt: str, check: Callable[[Outcome, Path], None]) -> Callable[[Path], tuple[list[str], Callable]]:  # type: ignore[type-arg]
    return lambda f: (["diagnose", str(hostile_hlo(f)), "--format", fmt], check)


def _gate(*extra: str, check: Callable[[Outcome, Path], None]) -> Callable[[Path], tuple[list[str], Callable]]:  # type: ignore[type-arg]
    def build(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
        base, cand = hostile_exports(f)
        return ["gate", str(base), str(cand), *extra], check
    return build


def _fifo(*extra: str, check: Callable[[Outcome, Path], None]) -> Callable[[Path], tuple[list[str], Callable]]:  # type: ignore[type-arg]
    def build(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
        run = f / "run"
        shutil.copytree(RUN, run)
        os.mkfifo(next(run.glob("plugins/profile/*/*.xplane.pb")).parent / "evil.xplane.pb")
        return ["stats", str(run), *extra], check
    return build


def _huge_event(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    path = f / "huge.trace.json.gz"
    block = gzip.compress(b"a" * (64 << 20), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(b'{"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1,"name":"'))
        for _ in range(64):
            out.write(block)
        out.write(gzip.compress(b'"}]}'))
    return ["stats", str(path)], _exit(2, "longer than")


def _huge_meta(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    path = f / "meta.trace.json"
    path.write_bytes(b'{"metadata": "' + b"x" * (80 << 20) + b'", "traceEvents": []}')
    return ["stats", str(path)], _exit(2)


def _deep_json(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    (f / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    return ["report", str(f / "deep.json"), "-o", str(f / "r.html")], _exit(2, "nested")


def _deep_toml(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    (f / "p.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    return ["gate", str(RUN), str(OTHER), "--policy", str(f / "p.toml")], _exit(2, "nested")


def _deep_pyproject(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    (f / ".git").mkdir()
    (f / "pyproject.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    return ["gate", str(RUN), str(OTHER)], _exit(2, "nested")


@contextmanager
def fake_scheduler(mode: str) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that is not a Dask scheduler: ``silent``, ``garbage`` or ``closes``."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            if mode == "closes":
                conn.close()
                continue
            if mode == "garbage":
                try:
                    conn.sendall(b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\nnot dask" * 100)
                except OSError:
                    pass
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        sock.close()


def _chart_folder_link(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    (f / "out").mkdir()
    (f / "outside").mkdir()
    (f / "out" / "rep-charts").symlink_to(f / "outside", target_is_directory=True)

    def check(o: Outcome, folder: Path) -> None:
        assert list((folder / "outside").iterdir()) == [], "an image was written through the link"
    return ["report", str(RUN), "--format", "md", "-o", str(f / "out" / "rep.md")], check


def _parquet(kind: str) -> Callable[[Path], tuple[list[str], Callable[[Outcome, Path], None]]]:
    def build(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from hlo_doctor.opstats import load_opstats
        from hlo_doctor.opstats.parquet import write_parquet

        stats = load_opstats(OTHER)
        src = write_parquet(stats, f / "src.parquet")
        table = pq.read_table(src)
        times = table.column("time_us").to_numpy().copy()
        ops = table.column("op").to_pylist()
        rows = [i for i, op in enumerate(ops) if op == ops[0]]
        times[rows] = np.nan if kind == "nan" else -times[rows]
        table = table.set_column(table.column_names.index("time_us"), "time_us", pa.array(times))
        pq.write_table(table, f / "cand.parquet")
        return ["gate", str(RUN), str(f / "cand.parquet")], _exit(2, "time_us")
    return build


def _report_field(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    doc = {"schema": "hlo-doctor.gate/1", "verdict": "pass", "baseline": "x", "candidate": {}, "ops": []}
    (f / "g.json").write_text(json.dumps(doc))
    return ["report", str(f / "g.json"), "-o", str(f / "r.html")], _exit(2, "baseline")


def _report_findings(f: Path) -> tuple[list[str], Callable[[Outcome, Path], None]]:
    doc = {"schema": "hlo-doctor.diagnosis/1", "findings": "x"}
    (f / "d.json").write_text(json.dumps(doc))
    return ["report", str(f / "d.json"), "-o", str(f / "r.html")], _exit(2, "findings")


CASES: tuple[Case, ...] = (
    Case("escaping", "diagnose --format concise", _hlo("concise", _no_attacker_lines)),
    Case("escaping", "diagnose --format github", _hlo("github", _no_attacker_lines)),
    Case("escaping", "diagnose table off a terminal", _hlo("table", _no_attacker_lines)),
    Case("escaping", "diagnose --format md", _hlo("md", _md_out)),
    Case("escaping", "gate --format github --strict", _gate("--format", "github", "--strict", check=_no_attacker_lines)),
    Case("escaping", "gate table", _gate("--rows", "50", check=_no_attacker_lines)),
    Case("escaping", "gate --format md", _gate("--format", "md", check=_md_out)),
    Case("escaping", "gate --format junit", _gate("--format", "junit", "-o", "g.xml", check=_junit("g.xml"))),
    Case("escaping", "gate --format html (U+2028)", _gate("--format", "html", "-o", "g.html", check=_html("g.html"))),
    Case("escaping", "stats --format csv", lambda f: (["stats", str(hostile_exports(f)[0]), "--format", "csv"], _csv)),
    Case("escaping", "report html (U+2028)",
         lambda f: (["report", str(hostile_exports(f)[0]), "-o", str(f / "r.html")], _html("r.html"))),
    Case("readers", "FIFO as a host file", _fifo(check=_exit(2, "FIFO")), 60),
    Case("readers", "FIFO, --skip-bad-hosts", _fifo("--skip-bad-hosts", check=_exit(0)), 60),
    Case("readers", "FIFO, --jobs 2 --skip-bad-hosts", _fifo("--jobs", "2", "--skip-bad-hosts", check=_exit(0)), 60),
    Case("readers", "4 GiB event name in 4 MiB gzip", _huge_event, 120),
    Case("readers", "80 MiB metadata string", _huge_meta, 120),
    Case("readers", "deep JSON to report", _deep_json, 60),
    Case("readers", "deep TOML --policy", _deep_toml, 60),
    Case("readers", "deep pyproject.toml", _deep_pyproject, 60),
    Case("writes", "report md: link at the charts folder", _chart_folder_link),
    Case("artifacts", "Parquet NaN samples to the gate", _parquet("nan")),
    Case("artifacts", "Parquet negative samples to the gate", _parquet("negative")),
    Case("artifacts", "report: gate JSON, baseline a string", _report_field),
    Case("artifacts", "report: diagnosis JSON, findings a string", _report_findings),
    # (A chart runtime planted in the cache: tests/security/test_chart_cache.py, which also checks the
    # runtime made again is the shipped one.)
)
"""Every case; the scheduler cases (a server the runner starts) are :data:`SCHEDULER_CASES`."""

SCHEDULER_CASES = ("silent", "garbage", "closes")
"""``stats --scheduler ADDRESS`` against each :func:`fake_scheduler` mode: exit 2 within 20 s (+ start)."""

__all__ = ["CASES", "NAME", "SCHEDULER_CASES", "Case", "Outcome", "common_judge", "fake_scheduler", "run_case"]
