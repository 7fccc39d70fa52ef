"""UUIDv7 ids: canonical, unique and strictly increasing."""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex import _ids
from emelex._ids import is_uuid7, new_id


def test_ids_are_canonical_uuid7() -> None:
    value = new_id()
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert str(parsed) == value
    assert is_uuid7(value)


def test_ids_carry_the_current_time() -> None:
    before = time.time_ns() // 1_000_000
    stamp = uuid.UUID(new_id()).int >> 80
    after = time.time_ns() // 1_000_000
    assert before - 1 <= stamp <= after + 1


def test_hundred_thousand_ids_strictly_increase() -> None:
    ids = [new_id() for _ in range(100_000)]
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)
    # String order and UUID order agree.
    assert [uuid.UUID(i).int for i in ids] == sorted(uuid.UUID(i).int for i in ids)
    # Many share a millisecond: order within it comes from the counter bits.
    stamps = [uuid.UUID(i).int >> 80 for i in ids]
    assert len(set(stamps)) < len(ids)


def test_order_survives_a_clock_that_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    first = new_id()
    # Pretend the generator returns ids from an earlier time, then the same id again.
    stale = "00000000-0000-7000-8000-000000000000"
    monkeypatch.setattr(_ids, "_generate", lambda: stale)
    following = [new_id() for _ in range(1000)]
    assert all(is_uuid7(i) for i in following)
    assert first < following[0]
    assert all(a < b for a, b in itertools.pairwise(following))


def test_successor_carries_into_the_timestamp() -> None:
    assert (
        _ids._successor("01936d3a-7c1e-7b4c-9d2f-3a6e5b1c0d8f")
        == "01936d3a-7c1e-7b4c-9d2f-3a6e5b1c0d90"
    )
    # rand_b full: carry into rand_a.
    assert (
        _ids._successor("01936d3a-7c1e-7000-bfff-ffffffffffff")
        == "01936d3a-7c1e-7001-8000-000000000000"
    )
    # Every random bit set: the next id is in the next millisecond.
    assert (
        _ids._successor("01936d3a-7c1e-7fff-bfff-ffffffffffff")
        == "01936d3a-7c1f-7000-8000-000000000000"
    )


def test_ids_from_many_threads_are_unique_and_each_thread_sees_order() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        out.extend(new_id() for _ in range(5_000))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for out in results for i in out]
    assert len(set(everything)) == len(everything)
    for out in results:
        assert out == sorted(out)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not-a-uuid",
        str(uuid.uuid4()),
        "01936d3a-7c1e-6b4c-9d2f-3a6e5b1c0d8f",  # version 6
        "01936d3a-7c1e-7b4c-cd2f-3a6e5b1c0d8f",  # wrong variant
        "01936D3A-7C1E-7B4C-9D2F-3A6E5B1C0D8F",  # not canonical (uppercase)
        "{01936d3a-7c1e-7b4c-9d2f-3a6e5b1c0d8f}",
        "01936d3a7c1e7b4c9d2f3a6e5b1c0d8f",
        "01936d3a-7c1e-7b4c-9d2f-3a6e5b1c0d8f\n",
    ],
)
def test_is_uuid7_rejects_other_strings(value: str) -> None:
    assert not is_uuid7(value)


def test_is_uuid7_rejects_non_strings() -> None:
    assert not is_uuid7(uuid.UUID(new_id()))  # type: ignore[arg-type]
    assert not is_uuid7(None)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_is_uuid7_matches_the_rfc_layout(bits: int) -> None:
    value = str(uuid.UUID(int=bits))
    parsed = uuid.UUID(value)
    assert is_uuid7(value) == (parsed.version == 7 and parsed.variant == uuid.RFC_4122)
