"""get_file_info's times: the arithmetic that replaced strftime writes what
``datetime.fromtimestamp(ns / 1e9)`` and strftime wrote, for every time they could
write (including the rounding of the float to the microsecond, half to even, that
carries into the next second), and ``unknown`` where they raised."""

from __future__ import annotations

import datetime as dt

from hypothesis import example, given
from hypothesis import strategies as st

from sandboxfs.tools.format import iso_time


def _strftime(ns: int) -> str | None:
    """What the server wrote before (None: it raised)."""
    try:
        stamp = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


SECOND = 10**9


@given(
    st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.integers(min_value=-62135596800 * SECOND, max_value=253402300800 * SECOND),
        st.builds(
            lambda s, frac: s * SECOND + frac,
            st.integers(min_value=0, max_value=4_000_000_000),
            st.sampled_from([0, 500, 499, 999_999_499, 999_999_500, 999_999_999, 999_500_000]),
        ),
    )
)
@example(0)
@example(-1)
@example(1_700_000_000_999_999_999)
@example(-62135596800 * SECOND)
@example(253402300800 * SECOND - 1)
@example(253402300800 * SECOND)
def test_times_are_written_as_before(ns: int) -> None:
    before = _strftime(ns)
    assert iso_time(ns) == (before if before is not None else "unknown")


def test_no_time_is_unknown() -> None:
    assert iso_time(None) == "unknown"
