"""moe_routing.hf: the routing rule of every supported model class, held against the model.

Each row of the table in ``moe_routing.hf.routers`` is checked on a tiny random model built from
a config (nothing downloaded): the experts and gate weights the adapter computes from the
collected logits equal, token by token, those the model's own forward hands its experts module
(read by a hook on it).  The routers are given random weights and correction biases large enough
to change the choice, so that a rule that ignored the bias, renormalised weights the model does
not renormalise or missed PhiMoE's sparsemixer would fail here (each case also checks that
Mixtral's rule *would* have been wrong where the model routes otherwise).  Then the arithmetic
of :class:`RoutingRule` (margins at the k-th/(k+1)-th boundary, the scores of a biased router)
and the refusals of :func:`routing_measurements` (probabilities, repeated positions).
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
import torch

from moe_routing import hf
from moe_routing.boundary.margin import top_two_margin

pytestmark = pytest.mark.kernels

try:
    HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
except ValueError:              # sys.modules["transformers"] is None: its import is blocked
    HAS_TRANSFORMERS = False
needs_hf = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed "
                              "(the library's 'hf' extra: pip install -e '.[hf]')")

BASE = dict(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
E = 6
LINEAR_ATTENTION = dict(layer_types=["linear_attention", "full_attention"],
                        linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                        linear_num_value_heads=2)

#: model class → its config class and MoE arguments (E = 6 experts, k = 2 unless said), one row
#: of the routers' table each; `norm_topk_prob` both ways where the class reads it
CASES = {
    "MixtralForCausalLM": ("MixtralConfig", dict(num_local_experts=E, num_experts_per_tok=2)),
    "MixtralForCausalLM-k3": ("MixtralConfig", dict(num_local_experts=E, num_experts_per_tok=3)),
    "MiniMaxForCausalLM": ("MiniMaxConfig", dict(num_local_experts=E, num_experts_per_tok=2,
                                                 head_dim=16)),
    "Qwen3_5MoeForCausalLM": ("Qwen3_5MoeTextConfig", dict(
        num_experts=E, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, head_dim=16, **LINEAR_ATTENTION)),
    "GptOssForCausalLM": ("GptOssConfig", dict(num_local_experts=E, num_experts_per_tok=2,
                                               head_dim=16)),
    "OlmoeForCausalLM": ("OlmoeConfig", dict(num_experts=E, num_experts_per_tok=2)),
    "OlmoeForCausalLM-norm": ("OlmoeConfig", dict(num_experts=E, num_experts_per_tok=2,
                                                  norm_topk_prob=True)),
    "FlexOlmoForCausalLM": ("FlexOlmoConfig", dict(num_experts=E, num_experts_per_tok=2,
                                                   pad_token_id=0)),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", dict(num_experts=E, num_experts_per_tok=2,
                                                   moe_intermediate_size=16,
                                                   shared_expert_intermediate_size=16)),
    "Qwen2MoeForCausalLM-norm": ("Qwen2MoeConfig", dict(num_experts=E, num_experts_per_tok=2,
                                                        moe_intermediate_size=16,
                                                        shared_expert_intermediate_size=16,
                                                        norm_topk_prob=True)),
    "Qwen3MoeForCausalLM-k3": ("Qwen3MoeConfig", dict(num_experts=E, num_experts_per_tok=3,
                                                      moe_intermediate_size=16, head_dim=16)),
    "Qwen3NextForCausalLM": ("Qwen3NextConfig", dict(
        num_experts=E, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, head_dim=16, **LINEAR_ATTENTION)),
    "JambaForCausalLM": ("JambaConfig", dict(
        num_experts=E, num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1,
        expert_layer_period=1, expert_layer_offset=0, mamba_d_state=4, mamba_dt_rank=4,
        use_mamba_kernels=False)),
    "PhimoeForCausalLM": ("PhimoeConfig", dict(num_local_experts=E, num_experts_per_tok=2)),
    # the sparsemixer routes to two experts whatever num_experts_per_tok says; a wide ε keeps
    # several logits in each weight's softmax
    "PhimoeForCausalLM-k3-wide": ("PhimoeConfig", dict(num_local_experts=E, num_experts_per_tok=3,
                                                       router_jitter_noise=0.4)),
    "Ernie4_5_MoeForCausalLM": ("Ernie4_5_MoeConfig", dict(
        moe_num_experts=E, moe_k=2, moe_intermediate_size=16, moe_layer_start_index=0)),
    "Ernie4_5_MoeForCausalLM-k3": ("Ernie4_5_MoeConfig", dict(
        moe_num_experts=E, moe_k=3, moe_intermediate_size=16, moe_layer_start_index=0)),
    "MiniMaxM2ForCausalLM": ("MiniMaxM2Config", dict(num_local_experts=E, num_experts_per_tok=2,
                                                     head_dim=16)),
}
#: where the model does not route by Mixtral's rule, and so where that rule must be wrong
NOT_MIXTRAL = {"OlmoeForCausalLM": "weights", "Qwen2MoeForCausalLM": "weights",
               "Qwen3MoeForCausalLM-k3": "weights", "JambaForCausalLM": "weights",
               "FlexOlmoForCausalLM": "weights", "PhimoeForCausalLM": "weights",
               "PhimoeForCausalLM-k3-wide": "experts", "Ernie4_5_MoeForCausalLM": "experts",
               "Ernie4_5_MoeForCausalLM-k3": "experts", "MiniMaxM2ForCausalLM": "experts"}


def tiny(case: str, seed: int = 0):
    """A tiny model of ``case`` whose routers have spread-out logits and, where the class has
    one, a random correction bias large enough to change many choices."""
    import transformers

    config_name, extra = CASES[case]
    cls_name = case.split("-")[0]
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(getattr(transformers, config_name)(**BASE, **extra))
    model.eval()
    with torch.no_grad():
        for _, router in hf.router_modules(model):
            router.weight.normal_(0.0, 0.5)
        for name, buf in list(model.named_buffers()) + list(model.named_parameters()):
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.15 * torch.randn_like(buf))
    return model


def forward_routing(model, ids):
    """(experts (n, k), weights (n, k)) per MoE layer as the model's forward hands them to its
    experts modules (a pre-hook on each), rows in the flattened batch order."""
    seen = []

    def hook(_module, args, kwargs):
        names = ("hidden_states", "top_k_index", "top_k_weights")
        got = list(args) + [kwargs[n] for n in names[len(args):]]
        seen.append((got[1].detach().long().numpy(), got[2].detach().double().numpy()))

    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")]
    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in experts]
    try:
        with torch.no_grad():
            model(ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return seen


def by_expert(experts: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's experts in increasing order, with their weights (the model's order is not
    part of what it computes: MiniMax-M2 takes its top-k unsorted)."""
    order = np.argsort(experts, axis=1)
    return np.take_along_axis(experts, order, 1), np.take_along_axis(weights, order, 1)


@needs_hf
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_supported_class_routes_as_its_own_forward(case):
    model = tiny(case)
    # ids from 1: id 0 is the padding id of some classes, its zero embedding ties every logit
    # (torch.topk breaks such ties its own way, the rules to the lower index)
    ids = torch.randint(1, BASE["vocab_size"], (8, 16), generator=torch.Generator().manual_seed(1))
    n = ids.numel()
    logits = hf.collect_router_logits(model, ids)
    rules = hf.routing_rules(model)
    layers = hf.routing_measurements(logits, np.zeros(n, dtype=np.int64), rules, widths=[0.1])
    truth = forward_routing(model, ids)
    assert len(truth) == len(layers) == 2
    for l, ((want_e, want_w), layer) in enumerate(zip(truth, layers)):
        got_e, got_w = by_expert(layer.experts, layer.weights)
        want_e, want_w = by_expert(want_e, want_w)
        assert got_e.shape == (n, rules[l].top_k)
        np.testing.assert_array_equal(got_e, want_e, err_msg=f"{case} layer {l}: experts")
        np.testing.assert_allclose(got_w, want_w, rtol=2e-5, atol=1e-6,
                                   err_msg=f"{case} layer {l}: gate weights")
    # Mixtral's rule, read with the model's k, is wrong where the class routes otherwise
    k = rules[0].top_k if not case.startswith("Phimoe") else model.config.num_experts_per_tok
    naive = hf.routing_measurements(logits, np.zeros(n, dtype=np.int64), k, widths=[0.1],
                                    allow_probability_rows=True)
    wrong = {"experts": False, "weights": False}
    for (want_e, want_w), layer in zip(truth, naive):
        if layer.experts.shape != want_e.shape or not np.array_equal(
                *(by_expert(e, w)[0] for e, w in ((layer.experts, layer.weights),
                                                  (want_e, want_w)))):
            wrong["experts"] = True
        elif not np.allclose(by_expert(layer.experts, layer.weights)[1],
                             by_expert(want_e, want_w)[1], rtol=1e-3):
            wrong["weights"] = True
    if case in NOT_MIXTRAL:
        assert wrong[NOT_MIXTRAL[case]], f"{case}: Mixtral's rule would not have been wrong"
    else:
        assert not any(wrong.values()), case


def table_classes() -> list[str]:
    """The model classes in the first column of the routers' table."""
    import moe_routing.hf.routers as routers

    rows = routers.__doc__.split("| how it is read")[1].split("\n\n")[0]
    return re.findall(r"^\| (\w+ForCausalLM)\b", rows, flags=re.M)


@needs_hf
def test_the_table_lists_every_supported_class_and_each_is_tested():
    listed = set(table_classes())
    assert listed == set(hf.SUPPORTED_MOE_CAUSAL_LMS)
    assert {c.split("-")[0] for c in CASES} == listed


@needs_hf
def test_the_rules_read_the_classes_settings():
    ernie, m2 = tiny("Ernie4_5_MoeForCausalLM"), tiny("MiniMaxM2ForCausalLM")
    (r0, r1), (s0, _) = hf.routing_rules(ernie), hf.routing_rules(m2)
    assert r0.selection == "softmax" and r0.margin_scores == "softmax(a) + b"
    np.testing.assert_allclose(r1.correction_bias, ernie.model.layers[1].mlp.gate.moe_statics
                               .e_score_correction_bias.detach().numpy().ravel())
    assert r0.norm_min == ernie.config.moe_norm_min
    assert s0.selection == "sigmoid" and s0.margin_scores == "sigmoid(a) + b"
    np.testing.assert_allclose(s0.correction_bias,
                               m2.model.layers[0].mlp.e_score_correction_bias.numpy())
    assert "MiniMaxM2ForCausalLM model.layers.0.mlp.gate" == s0.source
    olmoe = hf.routing_rules(tiny("OlmoeForCausalLM"))[0]
    assert not olmoe.renormalise and olmoe.margin_scores == "logits"
    phi = hf.routing_rules(tiny("PhimoeForCausalLM-k3-wide"))[0]
    assert (phi.selection, phi.top_k, phi.jitter_eps) == ("sparsemixer", 2, pytest.approx(0.4))


# ----------------------------------------------------------------------------- refused models
@needs_hf
def test_a_model_whose_rule_is_not_read_is_refused_naming_class_and_reason():
    import transformers

    class MyRouterMixtral(transformers.MixtralForCausalLM):
        """A subclass may route otherwise: it is not the table's class."""

    cfg = transformers.MixtralConfig(**BASE, num_local_experts=4, num_experts_per_tok=2)
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"MyRouterMixtral \(routed by MixtralTopKRouter, whose "
                                         r"routing rule this package does not read.*accepted:.*"
                                         r"MixtralForCausalLM"):
        hf.collect_router_logits(MyRouterMixtral(cfg), ids)
    with pytest.raises(ValueError, match="MyRouterMixtral"):
        hf.routing_rules(MyRouterMixtral(cfg))


# ---------------------------------------------------------------------------- the arithmetic
def test_the_margin_is_taken_at_the_kth_boundary():
    a = np.array([[4.0, 1.0, 3.0, 0.5, 2.0],
                  [0.0, 0.1, 0.2, 0.3, 0.5]])
    np.testing.assert_allclose(top_two_margin(a), [1.0, 0.2])               # unchanged for k = 1
    np.testing.assert_allclose(top_two_margin(a, 2), [1.0, 0.1])
    np.testing.assert_allclose(top_two_margin(a, 3), [1.0, 0.1])
    np.testing.assert_allclose(top_two_margin(a, 4), [0.5, 0.1])
    rng = np.random.default_rng(0)
    wide = rng.normal(size=(50, 80))                                     # the partial-sort path
    s = np.sort(wide, 1)
    for k in (1, 2, 7, 79):
        np.testing.assert_allclose(top_two_margin(wide, k), s[:, -k] - s[:, -k - 1])
    for k in (0, 5, 1.5, True):
        with pytest.raises(ValueError, match="k = "):
            top_two_margin(a, k)
    # the measurements: a top-2 router's margin is a_(2) − a_(3), not a_(1) − a_(2)
    (layer,) = hf.routing_measurements([a], np.zeros(2, dtype=np.int64), 2)
    np.testing.assert_allclose(layer.margins, [1.0, 0.1])
    (top1,) = hf.routing_measurements([a], np.zeros(2, dtype=np.int64), 1)
    np.testing.assert_allclose(top1.margins, [1.0, 0.2])
    b = np.array([[5.0, 4.5, 1.0, 0.0]])
    np.testing.assert_allclose(hf.routing_measurements([b], [0], 1)[0].margins, [0.5])
    np.testing.assert_allclose(hf.routing_measurements([b], [0], 2)[0].margins, [3.5])
    np.testing.assert_allclose(hf.routing_measurements([b], [0], 3)[0].margins, [1.0])


def test_a_biased_router_is_measured_on_its_selection_scores():
    """Token 0: the logits tie at the 2nd/3rd place, but the bias keeps its choice far from
    changing (margin 0.3 of the selection scores); token 1: the choice flips between experts
    whose logits are far apart, so its selection margin is ≈ 0."""
    bias = np.array([0.0, 0.3, 0.0, 0.0])
    rule = hf.RoutingRule(4, 2, "sigmoid", True, correction_bias=bias)
    a = np.array([[2.0, 0.0, 0.0, -3.0],
                  [2.0, -0.5, 0.742, -3.0]])       # σ(0.742) ≈ σ(−0.5) + 0.3
    s = 1 / (1 + np.exp(-a)) + bias
    experts, weights = rule.route(a)
    np.testing.assert_array_equal(experts, np.argsort(-s, 1, kind="stable")[:, :2])
    p = 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(weights, np.take_along_axis(p, experts, 1)
                               / np.take_along_axis(p, experts, 1).sum(1, keepdims=True))
    ss = np.sort(s, 1)
    np.testing.assert_allclose(rule.margins(a), ss[:, -2] - ss[:, -3])
    assert rule.margins(a)[0] == pytest.approx(0.3, abs=1e-12)
    assert top_two_margin(a, 2)[0] == 0.0                     # the logits' gap: no boundary here
    assert rule.margins(a)[1] < 1e-3 and top_two_margin(a, 2)[1] > 1.2
    (layer,) = hf.routing_measurements([a], [0, 1], [rule])
    np.testing.assert_allclose(layer.margins, rule.margins(a))
    assert layer.as_dict()["margin_scores"] == "sigmoid(a) + b"
    assert "router_entropy" not in layer.summary          # σ(a) is no distribution
    # Ernie's: softmax scores, the weights divided by max(sum, norm_min)
    ernie = hf.RoutingRule(4, 2, "softmax", True, correction_bias=bias, norm_min=0.9)
    e, w = ernie.route(a)
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    top = np.take_along_axis(p, e, 1)
    np.testing.assert_allclose(w, top / np.maximum(top.sum(1, keepdims=True), 0.9))


def test_the_sparsemixer_by_hand():
    """ε = 0.1: the first weight is a softmax over the logits a with (4 − a) / max(|a|, 4) ≤ 0.2
    (4 and 3.5, not 3 nor 1); the second, with the first expert masked, over those with
    (3.5 − a) / max(|a|, 3.5) ≤ 0.2 (3.5 and 3, not 1)."""
    rule = hf.RoutingRule(4, 2, "sparsemixer", False, jitter_eps=0.1)
    a = np.array([[4.0, 3.5, 3.0, 1.0]])
    experts, weights = rule.route(a)
    np.testing.assert_array_equal(experts, [[0, 1]])
    w1 = np.exp(4) / (np.exp(4) + np.exp(3.5))
    w2 = np.exp(3.5) / (np.exp(3.5) + np.exp(3.0))
    np.testing.assert_allclose(weights, [[w1, w2]])
    np.testing.assert_allclose(rule.margins(a), [0.5])           # a_(2) − a_(3)


def test_routing_rules_refuse_bad_settings_by_name():
    with pytest.raises(ValueError, match="selection = 'relu'"):
        hf.RoutingRule(4, 2, "relu")
    with pytest.raises(ValueError, match="top_k = 3.*2 for the sparsemixer"):
        hf.RoutingRule(4, 3, "sparsemixer")
    with pytest.raises(ValueError, match=r"correction_bias.shape = \(3,\)"):
        hf.RoutingRule(4, 2, correction_bias=np.zeros(3))
    with pytest.raises(ValueError, match="top_k = 5"):
        hf.RoutingRule(4, 5)
    with pytest.raises(ValueError, match=r"logits.shape = \(2, 3\)"):
        hf.RoutingRule(4, 2).route(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="top_k = 4.*no routing boundary"):
        hf.RoutingRule(4, 4).margins(np.zeros((2, 4)))


# -------------------------------------------------------------------- refusals of measurements
def test_probabilities_are_refused_where_logits_are_needed():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 4))
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    tasks = np.zeros(30, dtype=np.int64)
    with pytest.raises(ValueError, match=r"router_logits_per_layer\[0\]\[0\] = .*30 of 30 rows "
                                         r"are ≥ 0 and sum to 1.*pre-softmax router logits.*"
                                         r"allow_probability_rows=True"):
        hf.routing_measurements([p], tasks, 2)
    half = p.astype(np.float16)                       # rounding of a half-precision softmax
    with pytest.raises(ValueError, match="rows are ≥ 0 and sum to 1"):
        hf.routing_measurements([a, half], tasks, 2)
    one = a.copy()
    one[7] = [0.5, 0.25, 0.25, 0.0]
    with pytest.raises(ValueError, match=r"router_logits_per_layer\[0\]\[7\].*1 of 30"):
        hf.routing_measurements([one], tasks, 2)
    (layer,) = hf.routing_measurements([one], tasks, 2, allow_probability_rows=True)
    assert layer.margins.shape == (30,)
    with pytest.raises(ValueError, match="allow_probability_rows = 1"):
        hf.routing_measurements([a], tasks, 2, allow_probability_rows=1)
    hf.routing_measurements([a], tasks, 2)            # logits pass


@needs_hf
def test_what_transformers_records_as_router_logits_is_refused():
    model = tiny("MixtralForCausalLM")
    ids = torch.randint(0, 50, (2, 6))
    with torch.no_grad():
        recorded = model(ids, output_router_logits=True).router_logits
    assert hf.recorded_router_output(model, ids) == "probabilities"     # transformers 5.2
    with pytest.raises(ValueError, match="row of probabilities"):
        hf.routing_measurements(list(recorded), np.zeros(12, dtype=np.int64), 2)


def test_a_token_listed_twice_in_positions_is_refused():
    a = np.random.default_rng(1).normal(size=(4, 3))
    tasks = np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"positions = \[0, 0, 0, 1\].*distinct token indices "
                                         r"\(token 0 is listed 3 times"):
        hf.routing_measurements([a], tasks, 1, positions=[0, 0, 0, 1])
    with pytest.raises(ValueError, match="token 3 is listed 2 times"):
        hf.routing_measurements([a], tasks, 1, positions=torch.tensor([3, 1, 3]))
    (layer,) = hf.routing_measurements([a], tasks, 1, positions=[2, 0, 1])
    assert sum(map(sum, layer.summary["counts"])) == 3


def test_routing_arguments_are_refused_by_name():
    a = np.random.default_rng(2).normal(size=(4, 3))
    tasks = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match=r"routing = 3 .*1 ≤ k < E = 3.*no routing boundary"):
        hf.routing_measurements([a], tasks, 3)
    with pytest.raises(ValueError, match="routing = 'two'"):
        hf.routing_measurements([a], tasks, "two")
    rule = hf.RoutingRule.softmax_top_k(3, 1)
    with pytest.raises(ValueError, match="a list even of one"):
        hf.routing_measurements([a], tasks, rule)
    with pytest.raises(ValueError, match="routing = '2 rules'.*1 RoutingRule"):
        hf.routing_measurements([a], tasks, [rule, rule])
    with pytest.raises(ValueError, match=r"routing\[0\].n_experts = 4"):
        hf.routing_measurements([a], tasks, [hf.RoutingRule.softmax_top_k(4, 1)])
    with pytest.raises(ValueError, match="top_k = 3.*no routing boundary"):
        hf.routing_measurements([a], tasks, [hf.RoutingRule(3, 3)])
    with pytest.raises(ValueError, match=r"routing\[0\] = 'int'"):
        hf.routing_measurements([a], tasks, [1])
