"""The worker's buffer size: what it completes during two claim round trips,
between half its slots and twice as many, only while claims come back full."""

from __future__ import annotations

from conveyor.worker.prefetch import Prefetch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cycle(p: Prefetch, clock: Clock, completed: int, seconds: float, claim: float) -> None:
    """``completed`` runs over ``seconds``, then a full claim that took ``claim`` s."""
    for _ in range(completed):
        p.completed()
    clock.now += seconds
    p.after_claim(claim, full=True)


def test_short_jobs_grow_it_to_twice_the_slots_and_no_further() -> None:
    clock = Clock()
    p = Prefetch(None, 50, rate_limited=False, clock=clock)
    assert (p.base, p.size, p.ceiling) == (25, 25, 100)
    sizes = []
    for _ in range(20):  # 100 runs per 4 ms claim: 25,000/s, 200 needed
        cycle(p, clock, completed=100, seconds=0.004, claim=0.004)
        sizes.append(p.size)
    assert sizes[0] == 25  # a single sample moves the averages a fifth of the way
    assert sizes == sorted(sizes)
    assert sizes[-1] == 100


def test_long_jobs_keep_the_base() -> None:
    clock = Clock()
    p = Prefetch(None, 50, rate_limited=False, clock=clock)
    for _ in range(50):  # 50 ms jobs on 50 slots: 1,000/s; a 1 ms claim: 2 needed
        cycle(p, clock, completed=10, seconds=0.01, claim=0.001)
        assert p.size == 25


def test_a_short_claim_puts_it_back_to_the_base() -> None:
    clock = Clock()
    p = Prefetch(None, 50, rate_limited=False, clock=clock)
    for _ in range(20):
        cycle(p, clock, completed=100, seconds=0.004, claim=0.004)
    assert p.size == 100
    clock.now += 1
    p.after_claim(0.001, full=False)
    assert p.size == 25
    # The completion rate starts over too: one full claim does not jump back up.
    cycle(p, clock, completed=1, seconds=1.0, claim=0.004)
    assert p.size == 25


def test_failures_do_not_count() -> None:
    clock = Clock()
    p = Prefetch(None, 50, rate_limited=False, clock=clock)
    for _ in range(20):  # nothing completed (every run failed at once)
        cycle(p, clock, completed=0, seconds=0.004, claim=0.004)
    assert p.size == 25


def test_fixed_sizes_never_move() -> None:
    clock = Clock()
    for p in (
        Prefetch(3, 50, rate_limited=False, clock=clock),  # set by the user
        Prefetch(None, 50, rate_limited=True, clock=clock),  # rate limits are counted at claim
        Prefetch(None, 1, rate_limited=False, clock=clock),  # one slot: strict priority
    ):
        before = p.size
        for _ in range(20):
            cycle(p, clock, completed=100, seconds=0.004, claim=0.004)
        assert p.size == p.ceiling == before
