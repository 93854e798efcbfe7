"""Routing metrics against values computed by hand."""

import math

import numpy as np
import pytest

from moe_routing import routing_metrics as rm


def test_counts_and_conditional():
    c = rm.task_expert_counts([0, 0, 0, 1, 1, 2], [1, 1, 0, 2, 2, 2], 4, 3)
    assert c.tolist() == [[1, 2, 0], [0, 0, 2], [0, 0, 1], [0, 0, 0]]
    p = rm.expert_given_task(c)
    assert np.allclose(p[0], [1 / 3, 2 / 3, 0]) and np.allclose(p[3], 0)
    with pytest.raises(ValueError, match="ids in 0..2"):
        rm.task_expert_counts([0], [3], 2, 3)


def test_purity_matching_and_diagonal_hand_values():
    c = np.array([[8, 2, 0],
                  [1, 1, 8],
                  [5, 0, 5]])                          # N = 30
    # purity: column maxima 8 + 2 + 8
    assert rm.purity(c) == pytest.approx(18 / 30)
    # one-to-one best: (0,0)=8, (1,2)=8, (2,1)=0 → 16
    assert rm.matched_accuracy(c) == pytest.approx(16 / 30)
    # many-to-one: row maxima 8 + 8 + 5
    assert rm.many_to_one_accuracy(c) == pytest.approx(21 / 30)
    # diagonal with E = 3: c[0,0] + c[1,1] + c[2,2] = 8 + 1 + 5
    assert rm.diagonal_accuracy(c) == pytest.approx(14 / 30)


def test_diagonal_wraps_tasks_mod_experts():
    c = np.zeros((5, 2))
    c[np.arange(5), np.arange(5) % 2] = 1
    assert rm.diagonal_accuracy(c) == 1.0
    assert rm.matched_accuracy(c) == pytest.approx(2 / 5)     # only 2 tasks can be matched


def test_nmi_extremes_and_hand_value():
    assert rm.normalized_mutual_info(np.eye(4) * 3) == pytest.approx(1.0)
    assert rm.normalized_mutual_info(np.ones((3, 4))) == pytest.approx(0.0, abs=1e-12)
    c = np.array([[2, 0], [1, 1]])
    pj = c / 4
    pt, pe = pj.sum(1), pj.sum(0)
    mi = sum(pj[i, j] * math.log(pj[i, j] / (pt[i] * pe[j]))
             for i in range(2) for j in range(2) if pj[i, j] > 0)
    h = lambda p: -sum(x * math.log(x) for x in p if x > 0)
    assert rm.normalized_mutual_info(c) == pytest.approx(mi / ((h(pt) + h(pe)) / 2))


def test_entropy_and_utilisation():
    p = np.array([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    assert rm.router_entropy(p) == pytest.approx(math.log(4) / 2)
    assert rm.router_entropy(p, normalise=True) == pytest.approx(0.5)
    assert rm.expert_utilisation([0, 0, 3, 1], 4).tolist() == [0.5, 0.25, 0.0, 0.25]


def test_designated_counts_ceiling_hand_values():
    # K = 20 tasks of 100 tokens on E = 7 experts: six experts get 3 tasks, one gets 2
    c = rm.designated_counts(np.full(20, 100), 7)
    assert c.sum() == 2000 and rm.diagonal_accuracy(c) == 1.0
    assert rm.purity(c) == pytest.approx(7 / 20)       # each expert's majority: one task
    he = -(18 / 20 * math.log(3 / 20) + 2 / 20 * math.log(2 / 20))
    assert rm.normalized_mutual_info(c) == pytest.approx(2 * he / (math.log(20) + he))
    # K ≤ E: one-to-one, NMI 1
    assert rm.normalized_mutual_info(rm.designated_counts([5, 7, 9], 4)) == pytest.approx(1.0)


def test_independent_counts_keep_marginals_and_lose_dependence():
    c = rm.designated_counts(np.full(10, 400), 5)      # perfectly specialised, NMI 1
    ind = rm.independent_counts(c, seed=0)
    np.testing.assert_array_equal(ind.sum(1), c.sum(1))
    # expert loads: the same marginal up to multinomial noise (4000 tokens, 5 experts)
    np.testing.assert_allclose(ind.sum(0) / 4000, c.sum(0) / 4000, atol=0.03)
    assert rm.normalized_mutual_info(ind) < 0.01 < rm.normalized_mutual_info(c)
    np.testing.assert_array_equal(ind, rm.independent_counts(c, seed=0))   # seeded
    with pytest.raises(ValueError, match="integer row totals"):
        rm.independent_counts(c / 3)
