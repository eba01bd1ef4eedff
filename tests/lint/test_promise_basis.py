"""Which figure a fix's promise is when both a program (or engine) A/B and a replay timed it: the A/B
where it decided; the replay's where the A/B did not decide and its interval holds the replay's figure
(two diagnoses of one capture, one whose short A/B decided and one whose did not, then agree); else
nothing promised, as the A/B found.

Judge: two ``diagnose --remeasure`` runs of one engine capture (batch 64, vocab 256,000) on this
machine, 10 s engine A/B each: one undecided (165.1 -> 138.8 ms, "no saving promised, none
significant"), one decided (159.6 -> 124.6 ms, ~37.1 ms): the figures below are of that kind.
"""

from __future__ import annotations

from hlo_doctor.lint.program_ab import ProgramMeasurement
from hlo_doctor.lint.promise import FixPromise
from hlo_doctor.lint.replay.run import ReplayMeasurement


def _ab(ratio: float, interval: tuple[float, float]) -> ProgramMeasurement:
    decided = interval[1] < 1 or interval[0] > 1
    return ProgramMeasurement(fix="f", target="the bundled engine", a_us=160_000.0, b_us=160_000.0 * ratio, ratio=ratio,
                              ratio_interval=interval, level=0.95, outcome="improved" if decided else "inconclusive",
                              rounds=3, steps=15, budget_s=10.0, stopped="decided" if decided else "budget spent",
                              when="2026-12-06T06:00:00Z")


def _replay(saving_us: float, interval: tuple[float, float]) -> ReplayMeasurement:
    return ReplayMeasurement(fix="f", a_us=90_000.0, b_us=90_000.0 - saving_us, saving_us=saving_us,
                             interval_us=interval, pairs=20, capture_us=65_000.0, programs=("jit_sample(1)",),
                             removed=(), covered=("HD002",), modelled=(), modelled_us=0.0, jax_version="0.10.2",
                             same_machine=True, stopped="saving", cap_s=10.0)


def test_an_undecided_ab_whose_interval_holds_the_replays_figure_leaves_the_replays_promise() -> None:
    base = FixPromise(fix="f", findings=3, recoverable_us=50_000.0, cost_us=0.0, replay=_replay(25_000.0, (22_000.0, 28_000.0)))
    undecided = _ab(0.84, (0.62, 1.14))  # saving -22.4 to 60.8 ms: holds 25 ms
    p = FixPromise(**{**{f: getattr(base, f) for f in base.__slots__}, "program": undecided})  # type: ignore[arg-type]
    assert p.replay_stands and p.how == "replay" and p.net_us == 25_000.0
    assert p.interval_us == base.interval_us and p.verdict == "saving"
    line = p.line(160_000.0)
    assert line.startswith("fix f: ~25.0 ms per step") and ", measured by a program A/B of the bundled engine" in line
    assert "; the A/B did not decide, and the replay's figure, inside its interval, stands: measured by replaying" in line


def test_a_decided_ab_is_the_promise_and_an_undecided_one_that_excludes_the_replay_promises_nothing() -> None:
    replay = _replay(25_000.0, (22_000.0, 28_000.0))
    decided = FixPromise(fix="f", findings=3, recoverable_us=50_000.0, cost_us=0.0, replay=replay,
                         program=_ab(0.78, (0.70, 0.86)))
    assert not decided.replay_stands and decided.how == "program A/B"
    assert abs(decided.net_us - 160_000.0 * 0.22) < 1e-6
    narrow = FixPromise(fix="f", findings=3, recoverable_us=50_000.0, cost_us=0.0, replay=replay,
                        program=_ab(1.02, (0.95, 1.10)))  # saving -16 to 8 ms: not 25 ms
    assert not narrow.replay_stands and narrow.net_us == 0.0 and "no saving promised, none significant" in narrow.line(None)
    slower = FixPromise(fix="f", findings=3, recoverable_us=50_000.0, cost_us=0.0, replay=replay,
                        program=_ab(1.10, (1.05, 1.15)))
    assert not slower.replay_stands and slower.net_us < 0 and "slower" in slower.line(None)


def test_a_replay_within_the_negligible_band_promises_nothing_in_every_view() -> None:
    # A tiny interval can clear 0 and still lie within the negligible band (a real capture's replay did:
    # 327.4 -> 329.1 us... and its JSON promised what its line said it did not).
    tiny = ReplayMeasurement(fix="f", a_us=327.4, b_us=324.2, saving_us=3.2, interval_us=(0.4, 5.9), pairs=40,
                             capture_us=400.0, programs=("jit_sample(1)",), removed=(), covered=("HD002",),
                             modelled=(), modelled_us=0.0, jax_version="0.10.2", same_machine=True,
                             stopped="negligible", cap_s=10.0)
    assert tiny.significant and not tiny.promises
    p = FixPromise(fix="f", findings=1, recoverable_us=100.0, cost_us=0.0, replay=tiny)
    assert p.net_us == 0.0 and p.verdict == "no saving expected"
    assert "no saving promised, no change worth one" in p.line(1000.0) and "(~0% of the step)" not in p.line(1000.0)
