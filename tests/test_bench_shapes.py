"""bench/shapes.py's arithmetic: slot occupancy, the seeded waits and how jobs are dealt
over a shape's stages (the part itself runs with `python -m bench --only shapes`)."""

from bench.shapes import SHAPES, WAITS, _ideal, _jobs, _waits, occupancy


def test_slots_always_busy_read_as_full():
    # two slots, each running 100 ms jobs back to back
    slots = [(t / 10, t / 10 + 0.1) for t in range(10)] * 2
    assert abs(occupancy(slots, 2) - 1.0) < 1e-9


def test_an_idle_slot_while_work_waits_is_counted():
    # two slots; for the second half of each batch only one of them is busy
    slots = [(0.0, 1.0), (0.0, 0.5), (1.0, 2.0), (1.0, 1.5), (2.0, 2.1)]
    assert occupancy(slots, 2) == 0.75  # busy 3 slot-seconds of 2 x 2 until the last start


def test_the_mixed_waits_are_seeded_and_within_bounds():
    a, b = _waits(WAITS["mixed-c10"], 500), _waits(WAITS["mixed-c10"], 500)
    assert a == b
    assert 5 <= min(a) and max(a) <= 500
    assert _ideal(WAITS["sleep-50ms-c10"], _waits(WAITS["sleep-50ms-c10"], 100)) == 200
    assert _ideal(WAITS["sleep-50ms-c100"], _waits(WAITS["sleep-50ms-c100"], 100)) == 2000


def test_the_work_sits_where_the_shape_says():
    assert {j.type for j in _jobs(SHAPES["last-of-8"], [None] * 16)} == {"s8"}
    spread = [j.type for j in _jobs(SHAPES["spread-8"], [None] * 16)]
    assert sorted(set(spread)) == [f"s{i}" for i in range(1, 9)] and spread.count("s1") == 2
    assert [j.payload for j in _jobs(SHAPES["one"], [None, 50])] == [{}, {"ms": 50}]
