import pytest

from moe_routing.model import MoEConfig, MoETransformer, TrainConfig




def base(**kw):
    return MoEConfig(**{"vocab_size": 20, "max_len": 8, "d_model": 16, "n_heads": 2,
                        "n_experts": 4, "d_expert": 8, **kw})


@pytest.mark.parametrize("field, value, words", [
    ("n_experts", 0, "n_experts"),
    ("top_k", 5, "top_k"),
    ("top_k", 0, "top_k"),
    ("router_temperature", 0.0, "router_temperature"),
    ("router_temperature", -1.0, "router_temperature"),
    ("backend", "magic", "backend"),
    ("gate", "softmax", "gate"),
    ("activation", "tanh", "activation"),
    ("expert_sizes", (1, 2, 3), "expert_sizes"),
    ("expert_sizes", (1, 2, 3, 9), "expert_sizes"),
    ("router_block", (4, 20), "router_block"),
    ("vocab_size", 1, "vocab_size"),
])
def test_bad_config_names_field_and_range(field, value, words):
    with pytest.raises(ValueError, match=words) as err:
        base(**{field: value})
    assert "accepted" in str(err.value)


def test_top_k_message_states_range():
    with pytest.raises(ValueError, match=r"\[1, n_experts=4\]"):
        base(top_k=5)


def test_head_dim_default_and_explicit():
    assert base().head_dim == 8
    cfg = base(n_heads=3, d_head=5)
    assert cfg.attn_width == 15
    with pytest.raises(ValueError, match="d_head"):
        base(n_heads=3)                       # 16 not divisible by 3 and no d_head


def test_dense_variant_is_one_expert():
    cfg = MoEConfig.dense(vocab_size=20, max_len=8, d_ff=32, d_model=16, n_heads=2)
    assert (cfg.n_experts, cfg.top_k, cfg.d_expert) == (1, 1, 32)
    with pytest.raises(ValueError, match="n_experts"):
        MoEConfig.dense(vocab_size=20, max_len=8, d_ff=32, n_experts=3)


def test_model_rejects_non_config():
    with pytest.raises(ValueError, match="MoEConfig"):
        MoETransformer({"vocab_size": 3})


@pytest.mark.parametrize("kw, words", [
    ({"objective": "ce+magic", "steps": 1}, "objective"),
    ({"steps": None}, "exactly one"),
    ({"steps": 3, "epochs": 1}, "exactly one"),
    ({"steps": 0}, "steps"),
    ({"steps": 1, "lr": 0.0}, "lr"),
    ({"steps": 1, "device": "tpu"}, "device"),
])
def test_bad_train_config(kw, words):
    with pytest.raises(ValueError, match=words):
        TrainConfig(**kw)


def test_numpy_integers_accepted_and_stored_as_int():
    import numpy as np
    cfg = base(vocab_size=np.int64(20), expert_sizes=tuple(np.array([8, 2, 3, 0])))
    assert type(cfg.vocab_size) is int and all(type(s) is int for s in cfg.expert_sizes)
    with pytest.raises(ValueError, match="n_experts"):
        base(n_experts=2.5)
