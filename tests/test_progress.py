"""The progress lines of long theory loops (moe_routing._internal.progress)."""

import io
import re

import pytest

from moe_routing._internal.progress import Progress, duration


def test_lines_are_throttled_and_the_last_always_comes():
    out = io.StringIO()
    p = Progress("flow: RK4 step", 50, every=3600.0, stream=out)
    for i in range(1, 51):
        p.update(i)
    lines = out.getvalue().splitlines()
    assert lines == [lines[-1]] and re.fullmatch(r"flow: RK4 step: 50 of 50; elapsed .*, done",
                                                 lines[-1])


def test_every_update_reports_with_an_eta_when_unthrottled():
    out = io.StringIO()
    p = Progress("cells", 4, every=0.0, stream=out)
    p(1, note="d = 1")
    p.update(2, 4)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("cells: 1 of 4 (d = 1); elapsed ")
    assert "ETA " in lines[0] and "ETA unknown" not in lines[0]


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="^what = "):
        Progress("", 3)
    with pytest.raises(ValueError, match="^n = 0"):
        Progress("x", 0)
    with pytest.raises(ValueError, match="^i = 5"):
        Progress("x", 3).update(5)


def test_duration():
    assert [duration(s) for s in (4.14, 36.2, 200, 3900)] == ["4.1 s", "36 s", "3 min 20 s",
                                                               "1 h 05 min"]
