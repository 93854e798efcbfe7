"""Paper A's library refuses NaN, ±Inf, empty, wrong-shape and wrong-dtype input, by name.

Every public constructor and function of ``moe_routing.knowledge``, ``moe_routing.model``,
``moe_routing.experiments``, ``moe_routing.routing_metrics`` (and the construction's parameter
count) is driven through a table of its arguments.  Properties checked with hypothesis:

* a non-finite scalar (NaN, ±Inf; Python, NumPy or torch) given to any argument -- numeric or
  not -- raises ``ValueError`` whose message names the argument;
* a non-integral number, a string, None or a bool given where an integer is expected, too;
* an empty, wrong-rank or wrong-dtype array, or one holding NaN/Inf where the values are read,
  too;
* a NumPy scalar of a valid value gives the same result as the Python number it stands for;
* where the documentation says NaN *propagates* (the losses inside a training step read no
  values), the result is NaN -- never a number computed as if nothing happened.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from moe_routing import routing_metrics as rm
from moe_routing.construction.sizes import parameter_counts
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.runs import (grid_configs, results_frame, run_experiment,
                                                       run_grid)
from moe_routing.experiments.task_routing.store import load_result, result_path
from moe_routing.experiments.task_routing.data import task_selection
from moe_routing.experiments.task_routing.data import evaluate_run, experiment_dataset
from moe_routing.knowledge import (KnowledgeDataset, KnowledgeTask, PrefixTrie, Template,
                                   Tokenizer, build_dataset, functional_dictionary)
from moe_routing.knowledge.sources import (embedded_tasks, load_wikidata5m, relation_pool,
                                           relation_spec, write_official_format)
from moe_routing.knowledge.sources.embedded import sample_pairs
from moe_routing.knowledge.sources.wikidata5m_scan import read_aliases, scan_triples
from moe_routing.knowledge.sources.wikidata5m_files import resolve_files
from moe_routing.knowledge.trie import csr_groups
from moe_routing.model import (MoEConfig, MoETransformer, TrainConfig, TrainData,
                               build_and_train, collect_routing, exact_match, greedy_complete,
                               load_balancing_loss, next_token_cross_entropy, objective_loss,
                               parameter_count, router_z_loss, task_router_loss, task_to_expert,
                               train, valid_next_mass)
from moe_routing.model.dispatch import activation_fn, dispatch

SETTINGS = settings(max_examples=6, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

# ---- small objects the calls need ---------------------------------------------------------


@cache
def tasks():
    located = KnowledgeTask("located", ["⋆1 is in ⋆2."],
                            {"Paris": "France", "Rome": "Italy", "Lima": "Peru"})
    spoken = KnowledgeTask("spoken", ["⋆1 is spoken in ⋆2.", "⋆1 is heard in ⋆2."],
                           {"French": "France", "Italian": "Italy"})
    return [located, spoken]


@cache
def dataset():
    return KnowledgeDataset(tasks(), seed=0)


MODEL = dict(d_model=8, n_heads=2, n_experts=3, d_expert=8)


def model_config(**kw) -> MoEConfig:
    ds = dataset()
    return MoEConfig(**{"vocab_size": ds.vocab_size, "max_len": ds.seq_len, **MODEL, **kw})


@cache
def model() -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(model_config())


@cache
def split():
    return dataset().encode_split("all")


@cache
def train_data() -> TrainData:
    return TrainData.from_split(split())


@cache
def folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="refusals-"))


def tokens():
    return split().tokens


def probs():                                       # (6, 3) router probabilities
    return torch.tensor([[0.5, 0.25, 0.25]] * 6)


def index():                                       # (6, 1) chosen experts
    return torch.tensor([[0], [1], [2], [0], [1], [2]])


def logits():                                      # (2, 3, 5) next-token logits
    return torch.linspace(-1, 1, 30).reshape(2, 3, 5)


def targets():
    return torch.tensor([[1, 2, -100], [4, 0, 3]])


COUNTS = np.array([[3.0, 1.0], [0.0, 2.0], [1.0, 1.0]])
EXP = dict(n_tasks=2, n_experts=2, objective="ce", n_relations=4, n_pairs=12, n_templates=3,
           d_model=16, n_heads=2, d_expert=16, batch_size=32, warmup_steps=2)


# ---- the table ------------------------------------------------------------------------------


def same(a, b) -> bool:
    """Equal results of one code path (exact: the same computation on the same machine)."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, KnowledgeDataset):
        return a.sentences() == b.sentences() and np.array_equal(a.is_test, b.is_test)
    if isinstance(a, (list, tuple)) and a and isinstance(a[0], KnowledgeTask):
        return [(t.name, dict(t.dictionary), t.templates) for t in a] == \
            [(t.name, dict(t.dictionary), t.templates) for t in b]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):    # e.g. a PrefixTrie
        return type(a) is type(b) and same(vars(a), vars(b))
    return a == b


@dataclass
class Arg:
    """One argument of one public function: ``call(value)`` calls the function with that
    argument set to ``value`` (everything else valid); the error must name ``name``."""

    target: str                                  # the public function or constructor
    name: str                                    # what the error message must name
    call: Callable[[Any], Any]
    kind: str                                    # number | integer | other | array
    values: st.SearchStrategy | None = None      # valid Python values (number/integer)
    bad: list = field(default_factory=list)      # bad arrays (kind "array")
    none_ok: bool = False                        # None is a valid value (a default)

    def __repr__(self) -> str:
        return f"{self.target}({self.name})"


ARGS: list[Arg] = []


def number(target, name, call, lo=None, hi=None, check_same=True):
    values = st.floats(lo if lo is not None else -10.0, hi if hi is not None else 10.0,
                       allow_nan=False, allow_infinity=False) if check_same else None
    ARGS.append(Arg(target, name, call, "number", values))


def integer(target, name, call, lo=0, hi=6, check_same=True, none_ok=False):
    ARGS.append(Arg(target, name, call, "integer",
                    st.integers(lo, hi) if check_same else None, none_ok=none_ok))


def other(target, name, call):
    """A non-numeric argument (a string, a choice, a model): NaN or Inf is just a wrong value."""
    ARGS.append(Arg(target, name, call, "other"))


def array(target, name, call, *bad):
    ARGS.append(Arg(target, name, call, "array", bad=list(bad)))


def nan_at(t, i):
    """A copy of ``t`` with NaN at flat position ``i``."""
    t = t.clone() if isinstance(t, torch.Tensor) else np.array(t, dtype=float)
    t.reshape(-1)[i % t.reshape(-1).shape[0]] = math.nan
    return t


# knowledge: templates, tasks, tokenizer
other("Template", "Template.tokens", lambda v: Template((v,)))
other("Template.parse", "text", lambda v: Template.parse(v))
other("Template.fill", "subject", lambda v: tasks()[0].templates[0].fill(v, "x"))
other("KnowledgeTask", "KnowledgeTask.name", lambda v: KnowledgeTask(v, ["⋆1 is ⋆2."], {"a": "b"}))
other("KnowledgeTask", "KnowledgeTask.templates", lambda v: KnowledgeTask("t", v, {"a": "b"}))
other("KnowledgeTask", "entity name", lambda v: KnowledgeTask("t", ["⋆1 is ⋆2."], [(v, "b")]))
integer("KnowledgeTask.complexity_bound", "L",
        lambda v: tasks()[1].complexity_bound(L=v), lo=5, hi=20)
other("functional_dictionary", "entity name", lambda v: functional_dictionary([("a", v)]))
other("Tokenizer", "syntactic token", lambda v: Tokenizer([v], ["a"]))
other("Tokenizer.encode", "text", lambda v: dataset().tokenizer.encode(v))
other("Tokenizer.word_id", "word", lambda v: dataset().tokenizer.word_id(v))
integer("Tokenizer.is_entity_id", "i", lambda v: dataset().tokenizer.is_entity_id(v))
array("Tokenizer.decode", "ids", lambda v: dataset().tokenizer.decode(v),
      np.array([3.0, math.nan]), np.array([[3, 4]]), np.array([3, 10_000]))
# knowledge: the dataset and its trie
integer("KnowledgeDataset", "seed", lambda v: KnowledgeDataset(tasks(), seed=v))
number("KnowledgeDataset", "test_fraction",
       lambda v: KnowledgeDataset(tasks(), test_fraction=v), 0.05, 0.95)
other("KnowledgeDataset", "split_unit", lambda v: KnowledgeDataset(tasks(), split_unit=v))
array("KnowledgeDataset", "tasks", lambda v: KnowledgeDataset(v), [], [math.nan])
other("KnowledgeDataset.split_indices", "split", lambda v: dataset().split_indices(v))
other("KnowledgeDataset.encode_split", "split", lambda v: dataset().encode_split(v))
integer("KnowledgeDataset.template_ids", "task", lambda v: dataset().template_ids(v), 0, 1)
integer("KnowledgeDataset.dictionary_ids", "task", lambda v: dataset().dictionary_ids(v), 0, 1)
array("KnowledgeDataset.subset", "task", lambda v: dataset().subset(v), [math.nan], [1.5])
array("KnowledgeDataset.valid_next_mask", "nodes", lambda v: dataset().valid_next_mask(v),
      np.array([0.0, math.nan]), np.array([0, 10_000]), torch.tensor([0.5]))
array("KnowledgeDataset.is_valid_next", "nodes",
      lambda v: dataset().is_valid_next(v, np.zeros(np.shape(v), dtype=int)),
      np.array([math.nan]), np.array([10_000]))
array("KnowledgeDataset.valid_next", "ids", lambda v: dataset().valid_next(v),
      [1, math.nan], [], [1, 10_000])
integer("EncodedSplit.targets_masked", "ignore_index",
        lambda v: split().targets_masked(v), -100, -90)
integer("PrefixTrie.valid_next", "node", lambda v: dataset().trie.valid_next(v), 0, 3)
integer("PrefixTrie.prefix", "node", lambda v: dataset().trie.prefix(v), 0, 3)


def trie(seqs=None, lengths=None, vocab_size=9):
    seqs = np.array([[1, 3, 4, 2], [1, 3, 5, 2]]) if seqs is None else seqs
    lengths = np.array([4, 4]) if lengths is None else lengths
    return PrefixTrie(seqs, lengths, np.array([0, 1]), np.array([0, 1]), vocab_size)


integer("PrefixTrie", "vocab_size", lambda v: trie(vocab_size=v), 6, 16)
array("PrefixTrie", "seqs", lambda v: trie(seqs=v), np.zeros((0, 4), dtype=int),
      np.array([1, 3, 2]), np.array([[1.0, 3.0, math.nan, 2.0]] * 2),
      np.array([[1, 3, 40, 2]] * 2))
array("PrefixTrie", "lengths", lambda v: trie(lengths=v), np.array([4.0, math.nan]),
      np.array([4]), np.array([1, 4]), np.array([], dtype=int))
integer("csr_groups", "n_keys", lambda v: csr_groups([0, 1, 1], [2, 3, 3], v), 2, 7)
array("csr_groups", "keys", lambda v: csr_groups(v, [1, 2], 3), np.array([0.0, math.nan]),
      np.array([[0, 1]]), np.array([0, 7]))
# knowledge: sources and build_dataset (every refusal before any file is read)
integer("embedded_tasks", "n_relations",
        lambda v: embedded_tasks(v, n_pairs=3, n_templates=1), 1, 2, none_ok=True)
integer("embedded_tasks", "n_pairs", lambda v: embedded_tasks(2, n_pairs=v, n_templates=1),
        1, 5)
integer("embedded_tasks", "n_templates", lambda v: embedded_tasks(1, n_pairs=2, n_templates=v),
        1, 5)
integer("embedded_tasks", "seed", lambda v: embedded_tasks(1, n_pairs=2, seed=v), 0, 1)
array("embedded_tasks", "relations", lambda v: embedded_tasks(relations=v), [], [math.nan])
other("relation_pool", "rid", lambda v: relation_pool(v))
other("relation_spec", "rid", lambda v: relation_spec(v))
integer("sample_pairs", "n_pairs", lambda v: sample_pairs({"a": "b", "c": "d"}, "P1", v, 0), 1, 3)
integer("sample_pairs", "seed", lambda v: sample_pairs({"a": "b", "c": "d"}, "P1", 1, v))


def small(**kw):
    return build_dataset(**{"n_relations": 2, "n_pairs": 4, "n_templates": 1, "seed": 0, **kw})


integer("build_dataset", "n_relations", lambda v: small(n_relations=v), 1, 2,
        none_ok=True)
integer("build_dataset", "n_pairs", lambda v: small(n_pairs=v), 2, 5)
integer("build_dataset", "n_templates", lambda v: small(n_templates=v), 1, 2)
integer("build_dataset", "seed", lambda v: small(seed=v), 0, 1)
number("build_dataset", "test_fraction", lambda v: small(test_fraction=v), 0.1, 0.9)
other("build_dataset", "split_unit", lambda v: small(split_unit=v))
other("build_dataset", "on_missing_alias", lambda v: small(on_missing_alias=v))
other("build_dataset", "wikidata5m_path", lambda v: small(wikidata5m_path=v))


def wd5m(**kw):
    return load_wikidata5m(folder() / "no-such-dir", **kw)


for _name in ("n_pairs", "oversample", "n_templates", "seed", "min_pairs", "n_relations"):
    integer("load_wikidata5m", _name, lambda v, n=_name: wd5m(**{n: v}), check_same=False,
            none_ok=_name == "min_pairs")
array("load_wikidata5m", "relations", lambda v: wd5m(relations=v), [], "P36", [math.nan])
other("resolve_files", "path", lambda v: resolve_files(v))
for _name in ("n_lines", "n_entities", "seed", "chunk"):
    integer("write_official_format", _name,
            lambda v, n=_name: write_official_format(folder() / "w", **{"n_lines": 5, n: v}),
            check_same=False)
number("write_official_format", "multi_share",
       lambda v: write_official_format(folder() / "w", 5, multi_share=v), check_same=False)
for _name in ("k", "seed", "chunk_bytes", "max_line_bytes"):
    integer("scan_triples", _name,
            lambda v, n=_name: scan_triples([], {b"P36"}, **{"k": 3, "seed": 0, n: v}),
            check_same=False)
for _name in ("chunk_bytes", "max_line_bytes"):
    integer("read_aliases", _name,
            lambda v, n=_name: read_aliases(folder() / "none.txt", set(), **{n: v}),
            check_same=False)

# model: configuration, transformer, dispatch
for _name, _lo in (("vocab_size", 2), ("max_len", 9), ("d_model", 1), ("n_heads", 1),
                   ("d_expert", 1), ("n_experts", 1)):
    integer("MoEConfig", f"MoEConfig.{_name}",
            lambda v, n=_name: MoEConfig(**{"vocab_size": 20, "max_len": 9, "d_model": 12,
                                            "n_heads": 2, "d_head": 4, "n_experts": 6,
                                            "d_expert": 8, n: v}), _lo, _lo + 6)
integer("MoEConfig", "MoEConfig.top_k", lambda v: model_config(top_k=v), 1, 3)
integer("MoEConfig", "MoEConfig.d_head", lambda v: model_config(d_head=v), 1, 9, none_ok=True)
integer("MoEConfig", "MoEConfig.expert_sizes[0]",
        lambda v: model_config(expert_sizes=(v, 8, 8)), 0, 8)
integer("MoEConfig", "MoEConfig.router_block[0]",
        lambda v: model_config(router_block=(v, 8)), 0, 7)
number("MoEConfig", "MoEConfig.router_temperature",
       lambda v: model_config(router_temperature=v), 0.01, 10)
number("MoEConfig", "MoEConfig.init_std", lambda v: model_config(init_std=v), 1e-4, 1)
other("MoEConfig", "MoEConfig.gate", lambda v: model_config(gate=v))
other("MoEConfig", "MoEConfig.layernorm", lambda v: model_config(layernorm=v))
integer("MoEConfig.dense", "MoEConfig.d_expert",
        lambda v: MoEConfig.dense(vocab_size=9, max_len=4, d_ff=v, d_model=4, n_heads=2), 1, 9)
other("MoETransformer", "cfg", lambda v: MoETransformer(v))
array("MoETransformer.forward", "idx", lambda v: model()(v), tokens()[:0],
      tokens()[0], tokens().float(), torch.zeros(1, 99, dtype=torch.long))
array("MoETransformer.forward", "logits_mask", lambda v: model()(tokens(), logits_mask=v),
      torch.ones(tokens().shape), torch.ones(2, 2, dtype=torch.bool))


def knock(v):
    try:
        return model().knock_out([v])
    finally:
        model().restore_experts()


integer("MoETransformer.knock_out", "experts[0]", knock, 0, 2)
other("MoETransformer.knock_out", "mode", lambda v: model().knock_out([0], mode=v))
array("MoETransformer.set_weights", "weights['router.weight']",
      lambda v: MoETransformer(model_config()).set_weights({"router.weight": v}),
      nan_at(torch.zeros(3, 8), 5), torch.zeros(3, 7))
number("MoETransformer.param_groups", "weight_decay",
       lambda v: [g["weight_decay"] for g in model().param_groups(v)], 0, 1)
other("dispatch", "backend", lambda v: dispatch(v, *([None] * 7)))
other("activation_fn", "activation", lambda v: activation_fn(v))
array("parameter_count", "expert_ids", lambda v: parameter_count(model_config(), v),
      np.array([0.0, math.nan]), np.array([], dtype=int), np.array([0, 7]))
other("parameter_count", "config", lambda v: parameter_count(v))
other("parameter_counts", "model", lambda v: parameter_counts(v))

# model: training configuration, data and loop
for _name, _lo in (("lr", 1e-5), ("weight_decay", 0.0), ("grad_clip", 0.0), ("lb_alpha", 0.0),
                   ("router_alpha", 0.0), ("z_beta", 0.0)):
    number("TrainConfig", f"TrainConfig.{_name}",
           lambda v, n=_name: TrainConfig(steps=1, device="cpu", **{n: v}), _lo, 1.0)
for _name, _lo in (("steps", 1), ("batch_size", 1), ("warmup_steps", 0), ("seed", 0),
                   ("log_every", 1)):
    integer("TrainConfig", f"TrainConfig.{_name}",
            lambda v, n=_name: TrainConfig(**{"steps": 2, "device": "cpu", n: v}), _lo, _lo + 9)
other("TrainConfig", "TrainConfig.objective", lambda v: TrainConfig(steps=1, objective=v))
other("TrainConfig", "TrainConfig.device", lambda v: TrainConfig(steps=1, device=v))
other("TrainConfig", "TrainConfig.amp", lambda v: TrainConfig(steps=1, device="cpu", amp=v))
integer("TrainConfig.total_steps", "n_examples",
        lambda v: TrainConfig(epochs=2, device="cpu").total_steps(v), 1, 51)
array("TrainData", "TrainData.inputs", lambda v: TrainData(v, v.long() if v.is_floating_point()
                                                            else v),
      tokens()[:0], tokens().float(), tokens()[0])
array("TrainData", "TrainData.targets", lambda v: TrainData(tokens(), v),
      tokens().float(), tokens()[:, :2], torch.full(tokens().shape, -100))
array("TrainData", "TrainData.task_ids", lambda v: TrainData(tokens(), tokens(), v),
      torch.zeros(len(tokens())), torch.zeros(3, dtype=torch.long))
array("TrainData", "TrainData.router_mask", lambda v: TrainData(tokens(), tokens(), None, v),
      torch.ones(tokens().shape), torch.ones(2, 2, dtype=torch.bool))
integer("TrainData.check_vocab", "vocab_size",
        lambda v: train_data().check_vocab(v, 20), 20, 25)
other("train", "cfg", lambda v: train(model(), train_data(), v))
other("train", "data", lambda v: train(model(), v, TrainConfig(steps=1, device="cpu")))
integer("train", "eval_every",
        lambda v: train(model(), train_data(), TrainConfig(steps=1, device="cpu"),
                        eval_every=v), check_same=False, none_ok=True)
other("build_and_train", "model_cfg",
      lambda v: build_and_train(v, train_data(), TrainConfig(steps=1, device="cpu")))

# model: losses (arguments refused; tensor values propagate, see test_nan_values_propagate)
number("load_balancing_loss", "alpha", lambda v: load_balancing_loss(probs(), index(), alpha=v),
       0, 5)
array("load_balancing_loss", "router_probs", lambda v: load_balancing_loss(v, index()),
      probs()[:0], probs().long(), probs()[0])
array("load_balancing_loss", "expert_index", lambda v: load_balancing_loss(probs(), v),
      index().float(), index()[:3], index()[:0])
array("load_balancing_loss", "mask", lambda v: load_balancing_loss(probs(), index(), mask=v),
      torch.ones(6), torch.ones(5, dtype=torch.bool))
number("router_z_loss", "beta", lambda v: router_z_loss(probs().log(), beta=v), 0, 5)
array("router_z_loss", "router_logits", lambda v: router_z_loss(v), probs()[:0],
      probs().long())
array("next_token_cross_entropy", "logits", lambda v: next_token_cross_entropy(v, targets()),
      logits().long(), logits()[:, :, :0][:0], logits()[0, 0, 0])
array("next_token_cross_entropy", "targets", lambda v: next_token_cross_entropy(logits(), v),
      targets().float(), targets()[:, :2])
integer("next_token_cross_entropy", "ignore_index",
        lambda v: next_token_cross_entropy(logits(), targets(), ignore_index=v), -100, -97)
integer("task_to_expert", "n_experts", lambda v: task_to_expert(torch.arange(5), v), 1, 7)
array("task_to_expert", "task_ids", lambda v: task_to_expert(v, 3), torch.zeros(0, dtype=torch.long),
      torch.arange(3.0), torch.tensor([0, -1]))
array("task_router_loss", "router_logits", lambda v: task_router_loss(v, index()[:, 0]),
      probs()[:0], probs().long())
array("task_router_loss", "expert_targets", lambda v: task_router_loss(probs(), v),
      index()[:, 0].float(), index()[:3, 0], torch.tensor([0, 1, 2, 0, 1, 9]))
for _name in ("lb_alpha", "router_alpha", "z_beta"):
    number("objective_loss", _name,
           lambda v, n=_name: objective_loss(
               "ce+router", logits()[:, :, :3], targets().clamp(0, 2), logits()[:, :, :3],
               logits()[:, :, :3].softmax(-1), logits()[:, :, :1].long(), torch.tensor([0, 1]),
               **{n: v}), 0, 2)
other("objective_loss", "objective",
      lambda v: objective_loss(v, logits(), targets(), logits(), logits(), logits().long()))
array("objective_loss", "task_ids",
      lambda v: objective_loss("ce+router", logits(), targets(), logits()[:, :, :3],
                               logits()[:, :, :3].softmax(-1), logits()[:, :, :1].long(), v),
      None, torch.tensor([0.0, 1.0]), torch.tensor([0]))

# model: evaluation
OBJ = split().object_pos
integer("greedy_complete", "n_new", lambda v: greedy_complete(model(), tokens(), OBJ, v),
        0, 1)
integer("greedy_complete", "batch_size",
        lambda v: greedy_complete(model(), tokens(), OBJ, batch_size=v), 1, 10)
array("greedy_complete", "prefixes", lambda v: greedy_complete(model(), v, OBJ),
      tokens().float(), tokens()[:0], tokens()[0], torch.full(tokens().shape, 10_000))
array("greedy_complete", "lengths", lambda v: greedy_complete(model(), tokens(), v),
      OBJ.float(), OBJ[:2], torch.zeros_like(OBJ))
array("exact_match", "targets",
      lambda v: exact_match(model(), tokens(), OBJ, v),
      OBJ.float(), OBJ[:2], torch.full_like(OBJ, -100))
integer("valid_next_mass", "batch_size",
        lambda v: valid_next_mass(model(), tokens(), dataset().valid_next_mask(
            split().prefix_node), batch_size=v), 1, 13)
array("valid_next_mass", "valid",
      lambda v: valid_next_mass(model(), tokens(), v),
      dataset().valid_next_mask(split().prefix_node).float(),
      dataset().valid_next_mask(split().prefix_node)[:, :, :4], None)
array("valid_next_mass", "tokens",
      lambda v: valid_next_mass(model(), v, torch.zeros(*v.shape, dataset().vocab_size,
                                                        dtype=torch.bool)),
      tokens()[:0], tokens().float(), torch.full(tokens().shape, -1))
integer("collect_routing", "batch_size",
        lambda v: collect_routing(model(), tokens(), split().task, batch_size=v), 1, 13)
array("collect_routing", "mask", lambda v: collect_routing(model(), tokens(), split().task, v),
      torch.ones(tokens().shape), torch.zeros(tokens().shape, dtype=torch.bool),
      torch.ones(2, 2, dtype=torch.bool))
array("collect_routing", "task_ids", lambda v: collect_routing(model(), tokens(), v),
      split().task.float(), split().task[:2])

# experiments
# each field is refused by the part of the nested config that owns it
_PART = {**dict.fromkeys(("lr", "lb_alpha", "router_alpha", "steps", "batch_size",
                          "warmup_steps"), "TrainSchedule"),
         **dict.fromkeys(("n_tasks", "n_relations", "n_pairs", "n_templates", "data_seed",
                          "task_seed"), "DataConfig"),
         **dict.fromkeys(("n_experts", "d_model", "n_heads", "d_expert"), "MoEConfig"),
         "seed": "ExperimentConfig"}
for _name in ("lr", "lb_alpha", "router_alpha"):
    number("ExperimentConfig", f"{_PART[_name]}.{_name}",
           lambda v, n=_name: ExperimentConfig.from_flat(**{**EXP, n: v}), 1e-4, 1.0)
for _name, _lo in (("n_tasks", 1), ("n_experts", 1), ("seed", 0), ("n_relations", 4),
                   ("n_pairs", 2), ("n_templates", 1), ("data_seed", 0), ("task_seed", 0),
                   ("d_model", 1), ("n_heads", 1), ("d_expert", 1), ("steps", 1),
                   ("batch_size", 1), ("warmup_steps", 0)):
    integer("ExperimentConfig", f"{_PART[_name]}.{_name}",
            lambda v, n=_name: ExperimentConfig.from_flat(**{**EXP, "d_model": 16,
                                                             "n_heads": 1, n: v}),
            _lo, _lo + 1 if _lo < 4 else 5)
other("ExperimentConfig", "ExperimentConfig.objective",
      lambda v: ExperimentConfig.from_flat(**{**EXP, "objective": v}))
other("ExperimentConfig", "ExperimentConfig.device",
      lambda v: ExperimentConfig.from_flat(**{**EXP, "device": v}))
other("ExperimentConfig", "ExperimentConfig.amp", lambda v: ExperimentConfig.from_flat(**{**EXP, "amp": v}))
array("grid_configs", "n_tasks", lambda v: grid_configs(v, [2], **{
    k: x for k, x in EXP.items() if k not in ("n_tasks", "n_experts", "objective")}), [], 2)
other("run_experiment", "cfg", lambda v: run_experiment(v))
other("run_experiment", "profile", lambda v: run_experiment(ExperimentConfig.from_flat(**EXP), profile=v))
other("run_grid", "configs[0]", lambda v: run_grid([v], None, progress=False))
other("run_grid", "profile",
      lambda v: run_grid([ExperimentConfig.from_flat(**EXP)], None, profile=v, progress=False))
other("result_path", "artifacts_dir", lambda v: result_path(ExperimentConfig.from_flat(**EXP), v))
other("load_result", "cfg", lambda v: load_result(v, folder()))
array("results_frame", "results", lambda v: results_frame(v), [])
other("task_selection", "cfg", lambda v: task_selection(v))
other("experiment_dataset", "cfg", lambda v: experiment_dataset(v))
integer("evaluate_run", "n_experts", lambda v: evaluate_run(None, None, v), check_same=False)

# routing metrics
for _fn in (rm.expert_given_task, rm.purity, rm.normalized_mutual_info, rm.diagonal_accuracy,
            rm.matched_accuracy, rm.many_to_one_accuracy):
    array(_fn.__name__, "counts", _fn, nan_at(COUNTS, 2), np.where(COUNTS > 2, np.inf, COUNTS), COUNTS[:0],
          COUNTS[0], -COUNTS, np.zeros((2, 2)), COUNTS.astype(complex))
integer("task_expert_counts", "n_tasks", lambda v: rm.task_expert_counts([0, 1], [1, 0], v, 2), 2, 8)
integer("task_expert_counts", "n_experts",
        lambda v: rm.task_expert_counts([0, 1], [1, 0], 2, v), 2, 8)
array("task_expert_counts", "task_ids", lambda v: rm.task_expert_counts(v, [0, 1], 2, 2),
      np.array([0.0, math.nan]), np.array([], dtype=int), np.array([0, 5]), torch.ones(2))
array("task_expert_counts", "expert_ids", lambda v: rm.task_expert_counts([0, 1], v, 2, 2),
      np.array([0.0, math.inf]), np.array([0, 1, 1]), np.array([0, -1]))
array("router_entropy", "router_probs", lambda v: rm.router_entropy(v),
      nan_at(probs(), 4), probs()[:0], probs() * 2, -probs(), probs()[0, 0])
other("router_entropy", "normalise", lambda v: rm.router_entropy(probs(), normalise=v))
integer("expert_utilisation", "n_experts", lambda v: rm.expert_utilisation([0, 1, 1], v), 2, 8)
array("expert_utilisation", "expert_ids", lambda v: rm.expert_utilisation(v, 3),
      np.array([0.5, 1.0]), np.array([], dtype=np.int64), np.array([0, 3]))
integer("routing_summary", "n_tasks", lambda v: rm.routing_summary([0, 1], [1, 0], v, 2), 2, 8)
array("routing_summary", "router_probs",
      lambda v: rm.routing_summary([0, 1], [1, 0], 2, 2, v),
      torch.tensor([[0.5, math.nan], [1.0, 0.0]]), torch.ones(2, 3) / 3)

NUMERIC = [a for a in ARGS if a.kind in ("number", "integer")]
INTEGERS = [a for a in ARGS if a.kind == "integer"]
ALL_SCALAR = [a for a in ARGS if a.kind != "array"]
ARRAYS = [(a, i) for a in ARGS if a.kind == "array" for i in range(len(a.bad))]
SAME = [a for a in NUMERIC if a.values is not None]
#: the public functions and constructors this module drives (reported in the summary)
COVERED = sorted({a.target for a in ARGS})

NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf]).flatmap(
    lambda x: st.sampled_from([x, np.float64(x), np.float32(x), np.float16(x),
                               torch.tensor(x), np.array(x)]))
NOT_AN_INTEGER = st.sampled_from([2.5, -0.5, np.float32(1.5), "3", None, True, np.bool_(False),
                                  [3], torch.tensor(2.5)])


def refused(arg: Arg, value) -> str:
    with pytest.raises(ValueError) as err:
        arg.call(value)
    msg = str(err.value)
    assert arg.name in msg, f"{arg!r} with {value!r}: the error does not name it: {msg}"
    assert "accepted" in msg
    return msg


def ids(arg) -> str:
    return repr(arg)


@pytest.mark.parametrize("arg", ALL_SCALAR, ids=ids)
@SETTINGS
@given(bad=NON_FINITE)
def test_non_finite_scalars_are_refused_by_name(arg, bad):
    refused(arg, bad)


@pytest.mark.parametrize("arg", INTEGERS, ids=ids)
@SETTINGS
@given(bad=NOT_AN_INTEGER)
def test_non_integers_are_refused_where_an_integer_is_needed(arg, bad):
    assume(not (bad is None and arg.none_ok))
    refused(arg, bad)


@pytest.mark.parametrize("arg, i", ARRAYS, ids=lambda x: repr(x) if isinstance(x, Arg) else str(x))
def test_empty_wrong_shape_wrong_dtype_and_non_finite_arrays_are_refused(arg, i):
    refused(arg, arg.bad[i])


#: float inputs whose values are read: (argument, a valid value, call)
VALUES_READ = [
    (Arg("purity", "counts", rm.purity, "array"), COUNTS),
    (Arg("normalized_mutual_info", "counts", rm.normalized_mutual_info, "array"), COUNTS),
    (Arg("router_entropy", "router_probs", rm.router_entropy, "array"), probs()),
    (Arg("MoETransformer.set_weights", "weights['router.weight']",
         lambda v: MoETransformer(model_config()).set_weights({"router.weight": v}), "array"),
     torch.zeros(3, 8)),
]


@settings(SETTINGS, max_examples=40)
@given(case=st.sampled_from(VALUES_READ), i=st.integers(0, 23),
       bad=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_a_non_finite_entry_anywhere_is_refused_and_located(case, i, bad):
    arg, good = case
    value = good.clone() if isinstance(good, torch.Tensor) else good.copy()
    flat = value.reshape(-1)
    flat[i % flat.shape[0]] = bad
    msg = refused(arg, value)
    where = np.unravel_index(i % flat.shape[0], tuple(value.shape))
    assert f"{arg.name}[{', '.join(map(str, where))}]" in msg


@pytest.mark.parametrize("arg", SAME, ids=ids)
@SETTINGS
@given(data=st.data())
def test_numpy_scalars_are_accepted_with_the_same_result(arg, data):
    value = data.draw(arg.values, label="value")
    if arg.kind == "integer":
        kinds = [np.int64, np.int32, np.int16] + ([np.uint32, np.uint8] if 0 <= value < 256
                                                  else [])
        np_value = data.draw(st.sampled_from(kinds), label="type")(value)
        py_value = int(np_value)
    else:
        np_value = data.draw(st.sampled_from([np.float64, np.float32]), label="type")(value)
        py_value = float(np_value)
    try:
        expected = arg.call(py_value)
    except ValueError:                           # a value outside the range: refused alike
        refused(arg, np_value)
        return
    assert same(arg.call(np_value), expected), arg


NAN_PROPAGATES = [
    ("next_token_cross_entropy", lambda i: next_token_cross_entropy(nan_at(logits(), i),
                                                                    targets())),
    ("load_balancing_loss", lambda i: load_balancing_loss(nan_at(probs(), i), index())),
    ("router_z_loss", lambda i: router_z_loss(nan_at(probs(), i))),
    ("task_router_loss", lambda i: task_router_loss(nan_at(probs(), i), index()[:, 0])),
]


@settings(SETTINGS, max_examples=40)
@given(case=st.sampled_from(NAN_PROPAGATES), i=st.integers(0, 29))
def test_nan_values_in_loss_tensors_propagate_as_documented(case, i):
    """The losses read metadata only (they run in every step): NaN logits or probabilities give
    a NaN loss -- which the training loop then refuses -- never a finite one."""
    name, fn = case
    # a NaN in an ignored row (row 2 of the logits: target −100) does not enter the mean
    assume(not (name == "next_token_cross_entropy" and i // 5 == 2))
    assert math.isnan(float(fn(i))), name


def test_training_stops_on_a_non_finite_loss():
    data = train_data()
    m = MoETransformer(model_config())
    with torch.no_grad():
        m.unembed.weight.fill_(math.nan)
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train(m, data, TrainConfig(steps=3, device="cpu", progress=False, log_every=1))


def test_the_table_covers_every_area():
    areas = {"knowledge": {"Template", "KnowledgeTask", "KnowledgeDataset", "build_dataset",
                           "load_wikidata5m", "PrefixTrie", "Tokenizer"},
             "model": {"MoEConfig", "MoETransformer", "TrainConfig", "TrainData", "train",
                       "load_balancing_loss", "router_z_loss", "task_router_loss",
                       "next_token_cross_entropy", "objective_loss", "valid_next_mass",
                       "parameter_count"},
             "experiments": {"ExperimentConfig", "run_grid", "grid_configs", "load_result"},
             "routing_metrics": {"purity", "normalized_mutual_info", "router_entropy",
                                 "task_expert_counts", "routing_summary"}}
    for area, names in areas.items():
        assert names <= set(COVERED), (area, names - set(COVERED))


# ------------------------------------------------------------------------------ whole datasets, files

@pytest.mark.parametrize("bad", [[], (), None, "tasks"])
def test_a_build_refuses_what_is_not_a_dataset_by_name(bad):
    """An empty list of tasks used to fail with AttributeError deep inside the construction."""
    from moe_routing.construction import build_dense, build_moe

    for build in (build_moe, build_dense):
        with pytest.raises(ValueError, match=r"^dataset = .* accepted: a KnowledgeDataset"):
            build(bad, 1e-3)


TERM = re.compile(r"([0-9.e+-]+)·z\[(\d+)\] \('([^']*)'\)")


def test_the_gate_refusal_states_both_convex_combinations_in_one_numbering():
    """(H-gate) fails for task A (an XOR of its object slots against its other nodes), listed
    second so that its nodes are not the first structural nodes: every term λ·z[u] ('text') of
    the message must be a certificate row u (structural-node numbering), with its weight and
    prefix text, on its side — and the two weighted sums of codes must agree."""
    from test_construction_refusals import REFUSED, codes_of_nodes

    from moe_routing.construction import HypothesisFails, build_moe

    ds = KnowledgeDataset([KnowledgeTask("B", ["⋆1 lives in ⋆2."], {"Lyon": "France"}),
                           *REFUSED["H-gate"][0]], seed=0)
    with pytest.raises(HypothesisFails) as info:
        build_moe(ds, 1e-3)
    err, cert = info.value, info.value.certificate
    msg = str(err)
    assert err.hypothesis == "H-gate" and "equals one of" not in msg and "on rows [" not in msg
    slots, others = msg.split("equals a convex combination of those of the task's other nodes")
    nodes, Z = codes_of_nodes(ds)
    members = np.nonzero(nodes.label == 1)[0]                   # task A's nodes: the gate fit's rows
    assert not set(cert.rows) <= set(range(len(members)))       # so the two numberings differ here
    sums = []
    for side, text in enumerate((slots, others)):
        terms = TERM.findall(text)
        want = [(int(u), float(lam)) for u, lam, t in zip(cert.rows, cert.weights, cert.tag)
                if t == side]
        assert [int(u) for _, u, _ in terms] == [u for u, _ in want], (side, terms)
        for (lam, u, prefix), (_, w) in zip(terms, want, strict=True):
            assert float(lam) == pytest.approx(w, rel=1e-2)
            assert prefix == nodes.text(int(u), ds.tokenizer)
        sums.append(sum(float(lam) * Z[int(u)] for lam, u, _ in terms))
    assert np.abs(sums[0] - sums[1]).max() < 1e-2                # the stated combinations agree


def test_a_gz_whose_checksum_fails_is_reported_corrupt_anywhere(tmp_path):
    """One digit changed in the middle of a .gz of stored blocks still inflates; only the CRC
    at the end reveals it, so the report must not place the damage at the end of the file."""
    import gzip

    from test_knowledge_wikidata5m import TRIPLES, write

    write(tmp_path, triples=TRIPLES * 50, gz=True)
    p = tmp_path / "wikidata5m_transductive_train.txt.gz"
    data = bytearray(gzip.compress(gzip.decompress(p.read_bytes()), compresslevel=0))
    i = next(j for j in range(len(data) // 3, len(data)) if chr(data[j]).isdigit())
    data[i] = ord("7") if data[i] != ord("7") else ord("8")
    p.write_bytes(bytes(data))
    with pytest.raises(ValueError) as err:
        load_wikidata5m(tmp_path, relations=["P36"])
    msg = str(err.value)
    assert msg.startswith(f"{p.name}: the file is corrupt: its checksum does not match (the damage "
                          "can be anywhere in the file); download it again"), msg
    assert "truncated" not in msg and "breaks near byte" not in msg
