"""How the book writes a share with its interval (moe_routing._internal.display)."""

import math

from moe_routing._internal.display import share_interval


def test_a_share_inside_its_bounds_reads_plus_minus():
    assert share_interval(0.78, 0.09) == "78 ± 9"
    assert share_interval(0.5, 0.5) == "50 ± 50"                    # touching both bounds
    assert share_interval(0.123, 0.0456, 1) == "12.3 ± 4.6"


def test_an_interval_past_a_bound_is_cut_there_never_written_past_it():
    """The two-hop chapter printed "78 ± 100 %" and "34 ± 401 %" for reuse shares of two
    seeds: a share cannot leave [0, 100] %, so the interval is shown cut at the bounds."""
    assert share_interval(0.78, 1.0) == "78 [0–100]"
    assert share_interval(0.34, 4.01) == "34 [0–100]"
    assert share_interval(0.95, 0.10) == "95 [85–100]"
    assert share_interval(0.02, 0.05, 1) == "2.0 [0.0–7.0]"
    assert share_interval(math.nan, 0.1) == "–"
