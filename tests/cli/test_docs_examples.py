"""Every command output the README and docs/ show is what the tool prints now (the part that does not
depend on timing): each marked example is run as ``make docs`` runs it (``benchmarks/generate_docs.py``)
and compared; a change that alters an output fails here until ``make docs`` rewrites the block."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_docs", REPO / "benchmarks" / "generate_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _generator()
# Its own working folders, so that a 'make docs' running meanwhile keeps its own.
vars(GEN)["SCRATCH"] = REPO / "build" / "docs-test"
# Shorter measuring budgets than the docs were made with: the figures and verdicts they change are masked.
vars(GEN)["MEASURING"] = {"HLO_DOCTOR_MEASURE_SECONDS": "1", "HLO_DOCTOR_WHAT_IF_SECONDS": "1"}
EXAMPLES = [ex for doc in GEN.DOCS for ex in GEN.parse(doc)]
# Examples that share a working folder run in document order (a profile, then the diagnose of it).
GROUPS: dict[str, list] = {}
for _ex in EXAMPLES:
    GROUPS.setdefault(f"{_ex.doc.name}:{_ex.options.get('cwd') or 'default'}", []).append(_ex)


def test_every_shown_output_is_marked() -> None:
    assert len(EXAMPLES) >= 19
    assert [u for doc in GEN.DOCS for u in GEN.unmarked(doc)] == []


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_shown_outputs_are_what_the_tool_prints(group: str) -> None:
    fresh: set[str] = set()
    diffs: list[str] = []
    skipped: list[str] = []
    others: list[str] = []
    for ex in GROUPS[group]:
        if ex.options.get("check") == "none" or (ex.slow and not ex.options.get("small")):
            skipped.append(ex.name)
            continue
        if ex.other_jax():
            others.append(f"{ex.name}: {ex.other_jax()}")
            continue
        small = ex.slow
        diff = GEN.difference(ex, GEN.render(ex, fresh, small=small), small=small)
        if diff:
            diffs.append(diff)
    if not diffs and others and len(skipped) + len(others) == len(GROUPS[group]):
        pytest.skip("not run with this jax: " + "; ".join(others))
    if not diffs and skipped and len(skipped) == len(GROUPS[group]):
        pytest.skip("minutes of work, not run here (make docs rewrites them): " + "; ".join(skipped))
    assert not diffs, "run 'make docs' (or fix the change) - the documented output differs:\n" + "\n\n".join(diffs)


def test_the_comparison_masks_timing_and_keeps_the_rest() -> None:
    documented = "HD003   high   jit_x   f32[64,32000]{1,0}     532 us     7.6%   sampler.py:11\n│ 1 │ 5,146.1 │"
    assert GEN.masked(documented) == GEN.masked(
        "HD003 high jit_x f32[64,32000]{1,0}  12,532 us  17.6%  sampler.py:11\n│ 1 │    146.0 │")
    assert GEN.masked(documented) != GEN.masked(documented.replace("sampler.py:11", "sampler.py:12"))
    assert GEN.masked(documented) != GEN.masked(documented.replace("HD003", "HD002"))
    assert GEN.masked(documented) != GEN.masked(documented.replace("f32[64,32000]", "f32[64,32001]"))


def test_a_verdict_measured_here_is_masked_and_the_sentence_kept() -> None:
    # The two forms one capture's promise took on two machines: a saving here, none significant there.
    saving = ("fix bf16-greedy-sampler: ~1.2 ms per step (~9% of the step), measured by replaying "
              "jit_convert_element_type(78), jit_sample(124) on this machine (jax 0.10.2, 9 alternated pairs): "
              "4.1 ms -> 3.0 ms per step here; saves 27% of those programs; at the capture's pace 4.4 ms of them "
              "-> ~+1.2 ms [+0.9, +1.6 ms]")
    none = ("fix bf16-greedy-sampler: no saving promised, none significant, measured by replaying "
            "jit_convert_element_type(78), jit_sample(124) on this machine (jax 0.10.2, 5 alternated pairs): "
            "4.1 ms -> 4.0 ms per step here; no significant change here; at the capture's pace 4.4 ms of them "
            "-> ~+0.1 ms [-0.3, +0.4 ms]")
    assert GEN.masked(saving) == GEN.masked(none)
    # ...but which fix, which programs and what it was measured against still count.
    assert GEN.masked(saving) != GEN.masked(saving.replace("jit_sample(124)", "jit_sample(125)"))
    assert GEN.masked(saving) != GEN.masked(saving.replace("bf16-greedy-sampler", "donate-buffers"))
    whatif = ("fix bf16-greedy-sampler: ~38.3 ms recovered by 3 findings, less ~22.3 ms it costs on this machine "
              "(what-if run): net ~16.0 ms per step [12.1, 19.8 ms] (~14% of the step)")
    costs = ("fix bf16-greedy-sampler: ~38.3 ms recovered by 3 findings, less ~40.3 ms it costs on this machine "
             "(what-if run): may cost here, no saving promised: net -2.0 ms per step, anywhere in [-6.1, +1.8 ms]")
    assert GEN.masked(whatif) == GEN.masked(costs)
    assert GEN.masked(whatif) != GEN.masked(whatif.replace("3 findings", "2 findings"))


def test_an_undecided_ab_whose_replay_stands_is_masked_as_the_ab() -> None:
    # One capture's program A/B, decided on one run, undecided with the replay's figure standing on another.
    decided = ("fix eager-widening: ~1.4 ms per step (~18% of the profiled step), measured by a program A/B of "
               "sampler.py:step at line 12 on this machine (62 rounds x 5 steps each, alternated, decided within a "
               "10 s budget, measured here 2026-12-06): 6.7 ms -> 5.4 ms per step, x0.786 [0.695, 0.889] (improved); "
               "saving 1.4 ms [0.7 ms, 2.0 ms]")
    stands = (decided.replace("decided within", "budget spent within").replace("(improved)", "(inconclusive)")
              + "; the A/B did not decide, and the replay's figure, inside its interval, stands: measured by "
              "replaying jit_convert_element_type(3), jit_sample(5) on this machine (jax 0.10.2, 20 alternated pairs)")
    assert GEN.masked(decided) == GEN.masked(stands)
    assert GEN.masked(decided) != GEN.masked(decided.replace("line 12", "line 13"))


def test_a_severity_measured_here_is_masked_on_a_finding_line() -> None:
    row = "HD004   info   jit_sample   f32[64,32000]{1,0}   532 us   7.6%   sampler.py:12"
    assert GEN.masked(row) == GEN.masked(row.replace("info", "medium"))
    assert GEN.masked(row) != GEN.masked(row.replace("HD004", "HD003"))
    assert GEN.masked(row) != GEN.masked(row.replace("sampler.py:12", "sampler.py:9"))
    # A word of prose that is not a finding's line keeps its meaning.
    assert GEN.masked("the high half") != GEN.masked("the low half")


def test_a_line_shortened_where_a_verdict_ends_agrees_with_its_longer_cut() -> None:
    # Two cuts at 120 columns of one line, as two machines printed it: the verdict before the cut was
    # longer on the second, so the cut fell earlier.
    here = ["3 findings", "fix bf16-greedy-sampler: ~51.2 ms per step (~12% of the step), measured by replaying "
            "jit_convert_element_type(78), j ..."]
    there = ["3 findings", "fix bf16-greedy-sampler: ~51.2 ms recovered by 3 findings, less ~9.9 ms it costs on this "
             "machine (what-if), measured by replaying jit_con ..."]
    a, b = GEN._shortened_alike(GEN.masked("\n".join(here)), GEN.masked("\n".join(there)))
    assert a == b
    # ...but another fix, another program before the cut, or another line elsewhere still differs.
    for changed in (there[1].replace("bf16-greedy-sampler", "donate-buffers"),
                    here[1].replace("jit_convert_element_type(78)", "jit_convert_element_type(79)")):
        a, b = GEN._shortened_alike(GEN.masked("\n".join(here)), GEN.masked("\n".join([here[0], changed])))
        assert a != b
    a, b = GEN._shortened_alike(GEN.masked("\n".join(here)), GEN.masked("\n".join(["2 findings", there[1]])))
    assert a != b


def test_a_terminal_line_wrapped_elsewhere_compares_alike() -> None:
    """The README's ``diagnose runs/sampler --brief`` block as another machine's terminal wraps it: where
    the program A/B's long line breaks at 200 columns depends on its figures' widths, and a break inside
    ``10 s`` leaves two halves no mask knows. Both forms agree; a changed line still differs."""
    import textwrap

    (ex,) = [e for e in EXAMPLES if e.doc.name == "README.md"
             and e.steps[0].text == "hlo-doctor diagnose runs/sampler --brief"]
    lines = ex.shown.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("fix "))
    joined = lines[at] + " " + lines[at + 1]
    # A wider round count (more digits, as another machine's run may take) pushes the break to fall
    # between "10" and "s".
    rounds = re.search(r"\((\d+) rounds", joined)
    assert rounds is not None, joined
    for digits in range(len(rounds.group(1)), len(rounds.group(1)) + GEN.COLUMNS):
        wider = joined.replace(rounds.group(0), f"({'9' * digits} rounds", 1)
        wrapped = textwrap.wrap(wider, width=GEN.COLUMNS, break_long_words=False, break_on_hyphens=False)
        if wrapped[0].endswith(" 10") and wrapped[1].startswith("s "):
            break
    assert wrapped[0].endswith(" 10") and wrapped[1].startswith("s "), wrapped
    other = "\n".join(lines[:at] + wrapped + lines[at + 2:])
    assert GEN.difference(ex, other) == ""
    # Without joining the wrapped lines again, that break is a difference.
    assert GEN.masked(other) != GEN.masked(GEN.unwrapped(other))
    assert GEN.difference(ex, ex.shown.replace("sampler.py:12", "sampler.py:13")) != ""
    assert GEN.difference(ex, other.replace("eager-widening", "donate-buffers")) != ""


def test_the_day_a_figure_was_measured_is_masked() -> None:
    """An example run on another day prints another date beside a measured figure (``measured here
    2026-12-03``): the day the docs were generated is not the tool's output."""
    line = ("fix eager-widening: ~1.4 ms per step, measured by a program A/B of sampler.py:step at line 12 on this "
            "machine (27 rounds x 5 steps each, alternated, decided within a 10 s budget, measured here 2026-12-03)")
    assert GEN.masked(line) == GEN.masked(line.replace("2026-12-03", "2027-01-15"))
    assert GEN.masked(line) != GEN.masked(line.replace("line 12", "line 13"))


def test_a_replays_page_fault_clause_is_masked_there_or_not() -> None:
    """Whether a replay's written side took page faults, and how many, is the allocator's state."""
    line = ("fix bf16-greedy-sampler: ~23.4 ms per step (~12% of the step), measured by replaying jit_sample(124) "
            "on this machine (jax 0.10.2, 21 alternated pairs, decided, measured here 2026-12-06): 82.4 ms -> "
            "58.3 ms per step here; saves 28% of those programs")
    faulted = line + (", its written side took 32,002 page faults a step here, its fixed side 0: memory handed out "
                      "fresh each step, whose cost follows the allocator's state (another process may take more or "
                      "fewer)").replace(",", ";", 1)
    assert GEN.masked(faulted + "; no program A/B: x") == GEN.masked(line + "; no program A/B: x")
    assert GEN.masked(faulted) != GEN.masked(faulted.replace("jit_sample(124)", "jit_sample(125)"))


def test_a_replays_second_child_clause_is_masked_whatever_it_measured() -> None:
    """The fresh-pages child's figures and verdict are the allocator's and the machine's; the rest stays."""
    line = ("fix bf16-greedy-sampler: ~23.4 ms per step (~12% of the step), measured by replaying jit_sample(124) "
            "on this machine (jax 0.10.2, 21 alternated pairs, decided, measured here 2026-12-06): 82.4 ms -> "
            "58.3 ms per step here; saves 28% of those programs")
    one = line + ("; with every large buffer mapped fresh (the allocator's other state): 12.9 ms -> 790 us per step "
                  "here, saves ~12.2 ms (8,001 page faults a step on its written side, 0 on its fixed side); the "
                  "range holds both")
    other = line + ("; with every large buffer mapped fresh (the allocator's other state): 7.7 ms -> 7.4 ms per step "
                    "here, no significant change (66 page faults a step on its written side, 3 on its fixed side); "
                    "the range holds both")
    assert GEN.masked(one + "; no program A/B: x") == GEN.masked(other + "; no program A/B: x")
    assert GEN.masked(one) != GEN.masked(line)  # whether the second child ran is the tool's, not the machine's
    assert GEN.masked(one) != GEN.masked(one.replace("jit_sample(124)", "jit_sample(125)"))
