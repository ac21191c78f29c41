"""Learning-rate schedules: the fixed one ends at exactly zero; the time budget's moving one
(TimeBudgetSchedule) equals it while its plan holds, follows a moving end smoothly, and resumes."""

from __future__ import annotations

import pytest

from looplab.workers.train.optim import lr_factor
from looplab.workers.train.schedule import TimeBudgetSchedule


@pytest.mark.parametrize("frac", [0.01, 0.2, 0.5, 1.0])
def test_lr_reaches_zero_exactly_on_the_last_step(frac):
    for total in [1, 2, 3, 5, 7, 10, 33, 100, 101, 999, 12345]:
        f = [lr_factor(s, total, warmup_steps=0, cooldown_frac=frac) for s in range(total)]
        assert f[-1] == 0.0, (total, frac)
        assert all(0.0 <= x <= 1.0 for x in f)
        assert all(a >= b for a, b in zip(f, f[1:]))  # never rises without warmup
        if total >= 4 and frac <= 0.5:
            assert f[0] == 1.0


def test_warmup_then_constant_then_cooldown():
    f = [lr_factor(s, 100, warmup_steps=10, cooldown_frac=0.5) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0 and f[49] == 1.0 and f[50] == 1.0
    assert f[75] == pytest.approx(24 / 49) and f[99] == 0.0


def _schedule(total: int, frac: float = 0.5, warmup: int = 0) -> TimeBudgetSchedule:
    return TimeBudgetSchedule(10.0, total, 0.5, warmup_steps=warmup, cooldown_frac=frac)


def test_cooldown_by_hand_ten_steps():
    """T=10, half cooldown: flat to step 5, then x3/4, x2/3, x1/2, and 0 on the last step."""
    schedule = _schedule(10)
    got = [schedule.factor(s) for s in range(10)]
    assert got == pytest.approx([1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25, 0], abs=1e-15) and got[-1] == 0.0


@pytest.mark.parametrize("total,frac", [(10, 0.5), (37, 0.2), (100, 1.0), (2, 0.5)])
def test_cooldown_equals_the_fixed_schedule_when_the_plan_holds(total, frac):
    schedule = _schedule(total, frac)
    got = [schedule.factor(s) for s in range(total)]
    assert got == pytest.approx([lr_factor(s, total, 0, frac) for s in range(total)], abs=1e-12)
    assert got[-1] == 0.0


def test_cooldown_follows_a_moving_total_smoothly_to_zero():
    """T=10 until step 7, then 12: the ramp bends instead of jumping, and still ends at 0."""
    schedule = _schedule(10)
    got = []
    for s in range(12):
        schedule.total_steps = 10 if s < 7 else 12
        got.append(schedule.factor(s))
    # 0.75 at step 6; from step 7 each factor is the previous x (T-1-s)/(T-s) with T=12
    assert got[5:] == pytest.approx([1.0, 0.75, 0.6, 0.45, 0.3, 0.15, 0.0], abs=1e-15)
    assert got[-1] == 0.0


def test_a_growing_plan_never_raises_the_factor():
    schedule = _schedule(20)
    got = []
    for s in range(40):
        schedule.total_steps = 20 + s // 3 if s < 30 else 30
        if s >= schedule.total_steps:
            break
        got.append(schedule.factor(s))
    assert got[-1] == 0.0 and all(a >= b for a, b in zip(got, got[1:])) and len(got) == 29


def test_warmup_caps_the_factor_and_a_repeated_step_is_stable():
    schedule = _schedule(10, warmup=4)
    assert [schedule.factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert [schedule.factor(s) for s in range(4, 7)] == [1.0, 1.0, 0.75]
    assert schedule.factor(6) == schedule.factor(6) == 0.75  # asking again does not advance the ramp


def test_plan_by_hand():
    """10 s budget, calibrated 0.5 s/step → 20 steps; after three 0.25 s steps, 3 + 9.25/0.25 = 40."""
    schedule = _schedule(20)
    assert schedule.plan(0, 0.0) == 20
    for _ in range(2):
        schedule.observe(0.25)
    assert schedule.plan(2, 0.5) == 2 + 19  # two observed steps are too few: still the calibration
    schedule.observe(0.25)
    assert schedule.plan(3, 0.75) == 40 and schedule.total_steps == 40
    assert schedule.plan(5, 12.0) == 6  # past the budget: one more step, the last


def test_state_dict_resumes_the_same_ramp():
    whole, first = _schedule(10), _schedule(10)
    want = [whole.factor(s) for s in range(10)]
    got = [first.factor(s) for s in range(7)]
    second = _schedule(999)  # a resumed attempt: total and position come from the checkpoint
    second.load_state_dict(first.state_dict())
    got += [second.factor(s) for s in range(7, 10)]
    assert got == want
