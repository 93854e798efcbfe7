"""`moe_routing._internal.chapter.begin`: the chapters' prologue."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from moe_routing._internal.chapter import begin
from moe_routing._internal.ledger import Ledger


def draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_begin_seeds_every_generator_and_opens_the_ledger(tmp_path):
    ledger = begin("boundary_mass", profile="smoke", artifacts_dir=tmp_path, seed=3)
    first = draws()
    begin("boundary_mass", profile="smoke", artifacts_dir=None, seed=3)
    assert draws() == first
    begin("boundary_mass", profile="smoke", artifacts_dir=None, seed=4)
    assert draws() != first
    assert isinstance(ledger, Ledger) and ledger.profile == "smoke"


def test_begin_sets_threads_only_when_asked():
    old = torch.get_num_threads()
    try:
        begin("landscape", profile="default", artifacts_dir=None)
        assert torch.get_num_threads() == old
        begin("landscape", profile="default", artifacts_dir=None, threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("kw, match", [
    (dict(profile="full"), r"unknown profile 'full'; accepted: smoke, default, paper"),
    (dict(profile="smoke", seed=-1), r"seed = -1 is not allowed"),
    (dict(profile="smoke", threads=0), r"threads = 0 is not allowed"),
])
def test_bad_input_is_refused_before_anything_runs(kw, match):
    with pytest.raises(ValueError, match=match):
        begin("landscape", artifacts_dir=None, **kw)
