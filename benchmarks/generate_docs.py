"""Every command output the README and docs/*.md show, produced by the real tool (``make docs``).

A shown output is a fenced block after a marker that says what to run::

    <!-- hlo-doctor-example: hlo-doctor diagnose sample_traces/seed_v5e_b512 --brief -->
    ```
    (rewritten: "$ COMMAND" and what it printed, stdout and stderr as a shell shows them)
    ```

or, for several commands, hidden set-up and options::

    <!-- hlo-doctor-example
    file: sampler.py                   the ```python block above whose first line is "# sampler.py"
    setup: hlo-doctor profile sampler.py:step --out runs/sampler    (run, not shown)
    $ hlo-doctor diagnose runs/sampler --brief                      (run and shown)
    options: cwd=sampler tty cut=120 slow small="--vocab 1024"
    -->

Options: ``cwd=NAME`` runs in ``build/docs/NAME`` (shared by the examples naming it, in document
order; ``sample_traces`` is linked into it), default ``build/docs/default``; ``tty``: stdout and
stderr are a terminal (200 columns), as a person at a terminal sees the table; ``cut=N``: lines
longer than N characters end in `` ...``; ``slow``: minutes of work (a profile of the whole engine,
verify, doctor), rewritten only without ``--fast`` and checked by the test only where ``small=ARGS``
says how to run it small (ARGS appended to each ``hlo-doctor`` command that runs the engine; the test
then compares the commands and the labels the lines start with, not the rows or figures); ``unordered``: the order of the lines is timing
(rows ranked by the time of a capture made on the spot), so the check compares them sorted;
``check=none``: a block the test does not run; ``jax=VERSION``: the block shows what only that jax
prints (a replay of a sample capture made with it: on another jax the line is the model, by design),
so it is run and checked only with that jax installed.

``python benchmarks/generate_docs.py`` rewrites every block (``--fast``: all but the slow ones;
``--only TEXT``: the examples whose command contains TEXT; ``--check``: rewrite nothing, print the
difference of each block whose untimed part differs and exit 1). ``tests/cli/test_docs_examples.py``
runs the same check. The comparison masks what depends on timing (numbers with a decimal point or a
thousands separator, numbers with a time or percent unit, xprof's run folder names) and the spacing that their width moves
(runs of blanks, table rules); it keeps the lines, rule codes, source lines, fix ids and the wording.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SCRATCH = REPO / "build" / "docs"
MARKER = "<!-- hlo-doctor-example"
COLUMNS = 200
MEASURING: dict[str, str] = {}
"""``HLO_DOCTOR_MEASURE_SECONDS`` and ``HLO_DOCTOR_WHAT_IF_SECONDS`` for the examples' commands: none
set leaves the tool's defaults (what the docs show); the docs test sets shorter budgets, as the
figures and verdicts they change are masked there."""

_PROGRESS = re.compile(r"^\[\s*\d+(?:\.\d+)?s\] ")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_FLOAT = re.compile(r"(?<![\w.,\[(])(?:\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+(?!\d))")
_FAULTS = re.compile(r"; its written side took [^;]* page faults a step here[^;]*")
"""A replay's page-fault clause: there or not, and its counts, follow the allocator's state."""
_FRESH = re.compile(r"; with every large buffer mapped fresh \(the allocator's other state\): .*?; the range holds both")
"""A replay's second child (the allocator's other state): its figures and verdict are the machine's."""
_DATE = re.compile(r"\b20\d{2}-[01]\d-[0-3]\d\b")
"""The day a figure was measured (``measured here 2026-12-03``): the day the example ran, not the tool."""
_RUN_FOLDER = re.compile(r"\b\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\b")
"""The name xprof gives a capture's run folder: the time it was made."""
_UNIT = re.compile(r"(?<![\w.])\d+(?=\s?(?:us|µs|ms|s|min)\b|%)")
_TIME = re.compile(r"#\s?(?:us|µs|ms|s|min)\b")
"""A masked time and its unit: 532 us and 5.5 ms alike (which unit a figure gets depends on its size)."""
# What a measurement made on this machine prints beside its figure: how many pairs it took, the interval
# of a figure measured here, and where the store that keeps it lives (the reader's cache folder).
_PAIRS = re.compile(r"\b\d+ (alternated pairs|runs? each|paired runs|rounds x)\b")
_INTERVAL = re.compile(r"\[[-+]?\d[\d,]*(?:\.\d+)? ?(?:us|µs|ms|s)?, ")
_STORE = re.compile(r"^what-if: .*")
_CUT = re.compile(r"\S*\s\.\.\.$")
# What a figure measured here concludes (a saving, none significant, slower) is the machine's: the
# sentence around it is kept, its verdict masked. Applied after the figures are masked.
_VERDICT_REPLAY = re.compile(r"^(fix \S+: ).*?(, measured by (?:replaying|a program A/B) )")
# Whether pairs (a replay) or rounds (a program A/B) decided before their cap, the A/B's outcome, and
# the sign of its saving are the machine's too.
_STANDS = re.compile(r"; the A/B did not decide, and the replay's figure, inside its interval, stands: .*$")
"""Whether an undecided A/B left the replay's figure standing is the machine's: its line's tail."""
_STOPPED = re.compile(r", (?:decided|undecided at its #t cap)(?=, measured here)")
_AB_STOP = re.compile(r"\b(?:decided|budget spent) within a\b")
_AB_OUTCOME = re.compile(r"\((?:improved|no change|regressed|inconclusive)\)")
_SIGN = re.compile(r"(?<=saving )-(?=#t)|-(?=#t\])|(?<=per step, x)\d+\.\d+")
_VERDICT_HERE = re.compile(r"; (?:the change is slower here by #t: no saving promised|no significant change here"
                           r"|saves #% of those programs);")
# A finding's severity rests on a decisive measurement here where there is one: on a line naming a rule,
# the band (not the rule, its op or its line) is the machine's.
_SEVERITY = re.compile(r"(?<![\w-])(?:info|low|medium|high)(?![\w-])")
_RULE_CODE = re.compile(r"\bHD\d{3}\b")
_VERDICT_WHATIF = re.compile(r"(it costs on this machine \(.*?\)): (?:net ~|may cost here|no saving expected here).*$")
_LINE_START = re.compile(r"^(?:\$ |[─━]|HD\d{3}\b|what-if: |fix \S+: |skipped: |capture: |note: |\d+ findings?: )")
_RULES = re.compile(r"([─━═┄┈╌\-]){2,}|[ \t]+")
_BOX = str.maketrans({c: "|" for c in "┏┓┗┛┃│┡┩╇┳┻╋┣┫└┘┌┐├┤┬┴┼╭╮╯╰"})


@dataclass(frozen=True, slots=True)
class Step:
    """One line of a marker: ``run`` (shown), ``setup`` (run, not shown) or ``file`` (written)."""

    kind: str
    text: str


@dataclass(slots=True)
class Example:
    """A marker and the fenced block after it."""

    doc: Path
    marker_line: int
    """Index of the marker's first line."""
    open_line: int
    """Index of the block's opening fence."""
    close_line: int
    """Index of the block's closing fence."""
    steps: list[Step]
    options: dict[str, str] = field(default_factory=dict)
    shown: str = ""
    """The block's text as the document has it."""

    @property
    def slow(self) -> bool:
        return "slow" in self.options

    def other_jax(self) -> str:
        """Why this block is not run here: it shows what only ``jax=VERSION`` prints and this process
        has another jax ("" where it may run)."""
        want = self.options.get("jax", "")
        if not want:
            return ""
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = version("jax")
        except PackageNotFoundError:
            have = ""
        return "" if have == want else f"it shows what jax {want} prints (this is jax {have or 'missing'})"

    @property
    def name(self) -> str:
        first = next((s.text for s in self.steps if s.kind == "run"), "?")
        return f"{self.doc.name}:{self.marker_line + 1}: {first}"


def parse(doc: Path) -> list[Example]:
    """The examples of one document, in order."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    out: list[Example] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(MARKER):
            i += 1
            continue
        start = i
        head = lines[i][len(MARKER):].strip()
        body: list[str] = []
        if head.startswith(":") and head.endswith("-->"):
            body = ["$ " + head[1:-3].strip()]
        else:
            i += 1
            while not lines[i].strip().endswith("-->"):
                body.append(lines[i])
                i += 1
            if lines[i].strip() != "-->":
                body.append(lines[i].strip()[:-3])
        steps, options = _steps(body, doc, start)
        j = i + 1
        if j >= len(lines) or not lines[j].startswith("```"):
            raise SystemExit(f"{doc}:{start + 1}: a marker must be followed by a fenced block")
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        out.append(Example(doc, start, j, k, steps, options, "\n".join(lines[j + 1:k])))
        i = k + 1
    return out


def _steps(body: list[str], doc: Path, at: int) -> tuple[list[Step], dict[str, str]]:
    steps: list[Step] = []
    options: dict[str, str] = {}
    for raw in body:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("$ "):
            steps.append(Step("run", line[2:]))
        elif line.startswith("setup:"):
            steps.append(Step("setup", line[6:].strip()))
        elif line.startswith("file:"):
            steps.append(Step("file", line[5:].strip()))
        elif line.startswith("options:"):
            for item in shlex.split(line[8:]):
                key, _, value = item.partition("=")
                options[key] = value
        else:
            raise SystemExit(f"{doc}:{at + 1}: marker line not understood: {line!r}")
    return steps, options


def _python_block(doc: Path, name: str, before: int) -> str:
    """The ```python block before line ``before`` whose first line is ``# NAME``."""
    lines = doc.read_text(encoding="utf-8").split("\n")[:before]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("```python") and i + 1 < len(lines) and lines[i + 1].strip() == f"# {name}":
            end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
            return "\n".join(lines[i + 1:end]) + "\n"
    raise SystemExit(f"{doc}: no ```python block starting '# {name}' before line {before + 1}")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "FORCE_COLOR", "COLUMNS")}
    bin_dir = str(Path(sys.executable).parent)
    env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""), NO_COLOR="1", TERM="dumb",
               HLO_DOCTOR_PROGRESS_INTERVAL="3600", PYTHONHASHSEED="0")
    for name in ("HLO_DOCTOR_MEASURE_SECONDS", "HLO_DOCTOR_WHAT_IF_SECONDS"):
        env.pop(name, None)
    env.update(MEASURING)
    return env


def _workdir(name: str, fresh: set[str]) -> Path:
    """``build/docs/NAME``, emptied the first time this run uses it, with ``sample_traces`` linked in."""
    where = SCRATCH / name
    if name not in fresh:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        (where / "sample_traces").symlink_to(REPO / "sample_traces")
        fresh.add(name)
    return where


def _run(command: str, cwd: Path, tty: bool) -> str:
    """What ``command`` prints (stdout and stderr in the order printed), as bash runs it."""
    if not tty:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=False)
        return done.stdout.decode("utf-8", "replace")
    import pty

    master, slave = pty.openpty()
    env = dict(_env(), COLUMNS=str(COLUMNS), LINES="50", TERM="xterm")
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not data:
            break
        chunks.append(data)
    proc.wait()
    os.close(master)
    return _screen(b"".join(chunks).decode("utf-8", "replace"))


_CURSOR = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\r|\n")


def _screen(text: str) -> str:
    """What a terminal shows once ``text`` is written to it: a progress display drawn over and over
    and erased at its end (rich's transient bars: carriage returns, "erase line", "cursor up") leaves
    nothing, as it does on screen; every other line is kept as printed."""
    lines = [""]
    row = col = 0
    at = 0

    def put(chunk: str) -> None:
        nonlocal col
        line = lines[row].ljust(col)
        lines[row] = line[:col] + chunk + line[col + len(chunk):]
        col += len(chunk)

    for m in _CURSOR.finditer(text):
        put(text[at:m.start()])
        at = m.end()
        token, code = m.group(0), m.group(2)
        if token == "\n":  # (the terminal's output processing adds the carriage return)
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        elif token == "\r":
            col = 0
        elif code == "K":
            lines[row] = "" if m.group(1) == "2" else lines[row][:col]
        elif code == "A":
            row = max(0, row - int(m.group(1) or 1))
        elif code == "G":
            col = max(0, int(m.group(1) or 1) - 1)
    put(text[at:])
    return "\n".join(lines)


def _clean(text: str, options: dict[str, str], cwd: Path) -> list[str]:
    # Paths as the reader's own checkout and working folder would show them: no machine's paths.
    text = _ANSI.sub("", text).replace(f"{cwd}/", "").replace(f"{REPO}/", "").replace(str(REPO), ".")
    lines = [line.rstrip() for line in text.split("\n")]
    lines = [line for line in lines if not _PROGRESS.match(line)]
    while lines and not lines[-1]:
        lines.pop()
    cut = int(options["cut"]) if options.get("cut") else 0
    if cut:
        lines = [line if len(line) <= cut else line[: cut - 4].rstrip() + " ..." for line in lines]
    return lines


def render(example: Example, fresh: set[str], small: bool = False) -> str:
    """Run the example's steps; the block's new text."""
    cwd = _workdir(example.options.get("cwd") or "default", fresh)
    tty = "tty" in example.options
    extra = example.options.get("small", "") if small else ""
    out: list[str] = []
    for step in example.steps:
        if step.kind == "file":
            (cwd / step.text).write_text(_python_block(example.doc, step.text, example.marker_line))
            continue
        command = _small(step.text, extra) if extra else step.text
        printed = _clean(_run(command, cwd, tty), example.options, cwd)
        if step.kind == "run":
            out.append(f"$ {step.text}")
            out.extend(printed)
    return "\n".join(out)


def _small(command: str, extra: str) -> str:
    """``command`` with ``extra`` after each ``hlo-doctor`` subcommand that runs the engine."""
    return re.sub(r"(hlo-doctor (?:profile|doctor|verify|engine run)\b[^;|&#]*)", lambda m: m.group(1).rstrip()
                  + " " + extra + " ", command)


def masked(text: str) -> list[str]:
    """The part of a block that does not depend on timing, one entry per line."""
    out = []
    for line in text.split("\n"):
        line = _CUT.sub("...", _STORE.sub("what-if: #", _FAULTS.sub("", _FRESH.sub("; #fresh", _STANDS.sub("", line)))))
        line = _PAIRS.sub(r"# \1", _INTERVAL.sub("[#, ", line))
        line = _TIME.sub("#t", _UNIT.sub("#", _FLOAT.sub("#", _RUN_FOLDER.sub("<run>", _DATE.sub("<date>", line))))).translate(_BOX)
        line = _VERDICT_REPLAY.sub(r"\1<verdict>\2", _VERDICT_HERE.sub("; <verdict here>;", line))
        line = _SIGN.sub(lambda m: "#" if m.group(0) != "-" else "", _AB_OUTCOME.sub("(<outcome>)", _AB_STOP.sub("<stop> within a", _STOPPED.sub("", line))))
        line = _VERDICT_WHATIF.sub(r"\1: <verdict>", line)
        if _RULE_CODE.search(line):
            line = _SEVERITY.sub("<sev>", line)
        line = _RULES.sub(lambda m: " " if m.group(0)[0] in " \t" else m.group(0)[0] * 2, line).strip()
        out.append(line)
    return out


def structure(text: str) -> list[str]:
    """What a slow block keeps when run at a small size: its commands and, in the order they first
    come, the labels its lines start with (``capture:``, ``verify:``, ``note:``, ``estimate:``...);
    which rows a table has and how many depend on the timings, so they are left out."""
    out: list[str] = []
    for line in masked(text):
        first = line.split(" ", 1)[0]
        label = line if line.startswith("$ ") else first if first.endswith(":") and len(first) > 1 else ""
        if label and label not in out:
            out.append(label)
    return out


def unwrapped(text: str, columns: int = COLUMNS) -> str:
    """A terminal's text with the lines it wrapped joined again: a line is continued by the next one
    where the next one's first word would not have fitted after it (how rich breaks a long line at
    ``columns``); a line a table's rule or a new label starts is never a continuation."""
    out: list[str] = []
    for line in text.split("\n"):
        words = line.split()
        if (out and words and out[-1] and not _LINE_START.match(line)
                and len(out[-1]) + 1 + len(words[0]) > columns):
            out[-1] = out[-1] + " " + line.lstrip()
        else:
            out.append(line)
    return "\n".join(out)


def difference(example: Example, new: str, small: bool = False) -> str:
    """A unified diff of the block's untimed part, documented against produced; "" when they agree."""
    view = structure if small else masked
    if "tty" in example.options:
        # Masked as the lines were before the terminal wrapped them (a break inside ``10 s`` would
        # leave both halves unmasked).
        old, fresh = view(unwrapped(example.shown)), view(unwrapped(new))
    else:
        old, fresh = view(example.shown), view(new)
    if "tty" in example.options:
        # A terminal of 200 columns wraps a long line where its figures' widths put the break: the
        # words are compared, not where the lines break.
        # (a capture made on the spot also orders its rows by timing: its words are compared as a set)
        order = sorted if "unordered" in example.options else list
        old, fresh = ([" ".join(order(w for line in lines for w in line.split()))] for lines in (old, fresh))
    if "unordered" in example.options:
        # A capture made on the spot: which of two ops takes longer, and so the rows' order, is timing.
        # (with the rank a table's first column gives them)
        old, fresh = (sorted(re.sub(r"^\| \d+ \|", "| # |", line) for line in lines) for lines in (old, fresh))
    old, fresh = _shortened_alike(old, fresh)
    if old == fresh:
        return ""
    return "\n".join(difflib.unified_diff(old, fresh, f"{example.name} (as documented, masked)",
                                          "as the tool prints it now (masked)", lineterm="", n=2))


def _shortened_alike(old: list[str], fresh: list[str]) -> tuple[list[str], list[str]]:
    """Two lines a ``cut`` shortened agree where one's words are the start of the other's: where the cut
    falls depends on the widths of the figures and verdicts before it, which are the machine's."""
    if len(old) != len(fresh):
        return old, fresh
    old, fresh = list(old), list(fresh)
    for i, (a, b) in enumerate(zip(old, fresh, strict=True)):
        if a != b and a.endswith("...") and b.endswith("..."):
            short, long_ = sorted((a[:-3].rstrip(), b[:-3].rstrip()), key=len)
            if long_.startswith(short):
                old[i] = fresh[i] = short + " ..."
    return old, fresh


def rewrite(examples: list[Example], texts: dict[int, str]) -> None:
    """Write each document with the new texts of its examples (by index in ``examples``)."""
    by_doc: dict[Path, list[tuple[Example, str]]] = {}
    for i, ex in enumerate(examples):
        if i in texts:
            by_doc.setdefault(ex.doc, []).append((ex, texts[i]))
    for doc, items in by_doc.items():
        lines = doc.read_text(encoding="utf-8").split("\n")
        for ex, text in sorted(items, key=lambda it: -it[0].open_line):
            lines[ex.open_line + 1:ex.close_line] = text.split("\n") if text else []
        doc.write_text("\n".join(lines), encoding="utf-8")


def unmarked(doc: Path) -> list[str]:
    """Fenced blocks that show a command's output (a ``$ hlo-doctor`` line) without a marker."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    found, i, previous = [], 0, ""
    while i < len(lines):
        if lines[i].startswith("```"):
            k = i + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            body = lines[i + 1:k]
            shows = any(line.startswith("$ hlo-doctor") for line in body) and lines[i].strip() in ("```", "```text")
            if shows and not previous.startswith(MARKER) and not previous.strip().endswith("-->"):
                found.append(f"{doc.relative_to(REPO)}:{i + 1}: {body[0][:80]}")
            i = k
        if lines[i].strip():
            previous = lines[i]
        i += 1
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="leave the slow examples as they are")
    parser.add_argument("--only", default="", help="only the examples whose commands contain TEXT")
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 where a block differs")
    args = parser.parse_args(argv)
    examples = [ex for doc in DOCS for ex in parse(doc)]
    fresh: set[str] = set()
    texts: dict[int, str] = {}
    failed = 0
    began = time.perf_counter()
    for i, ex in enumerate(examples):
        if (args.fast and ex.slow) or (args.only and not any(args.only in s.text for s in ex.steps)):
            continue
        if ex.other_jax():
            print(f"   -    {ex.name}: left as it is: {ex.other_jax()}", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        new = render(ex, fresh)
        print(f"{time.perf_counter() - t0:6.1f}s  {ex.name}", file=sys.stderr)
        if args.check:
            diff = difference(ex, new)
            if diff:
                failed += 1
                print(diff, file=sys.stderr)
        else:
            texts[i] = new
    if not args.check:
        rewrite(examples, texts)
    for line in (u for doc in DOCS for u in unmarked(doc)):
        print(f"unmarked output block: {line}", file=sys.stderr)
    print(f"{len(texts) if not args.check else len(examples)} example(s), {time.perf_counter() - began:.0f} s",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
