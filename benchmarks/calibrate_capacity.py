"""Capacity probe: is there a training regime where the number of experts matters?

Run:  .venv/bin/python benchmarks/calibrate_capacity.py [--quick] [--out FILE] [--only LABEL]

Why.  Paper A's accuracy claims ("task routing costs no accuracy", "fewer active parameters at
equal accuracy") carry information only where capacity binds.  The earlier calibration
(``benchmarks/calibrate_training.py``) found that it does not bind in the experts: every subject
is one token, so its embedding row can hold all its answers, and the read-out is linear in the
residual stream -- a one-layer model stores the facts in the token-embedding table, and at
``d_model`` 16 the *residual width* limits accuracy, whatever the number of experts.

The hypothesis tested here.  Write each subject as **two** tokens, a code ``(a, b)`` over two
small sub-vocabularies of q symbols each (codes drawn at random, one per subject entity, the
same in every relation -- like a name that a real tokenizer splits into two pieces).  Each
symbol is then shared by several subjects, so no embedding row belongs to one subject.  The
residual stream after attention is, up to the softmax weights and the LayerNorms, a sum of
per-token features, and the logits are linear in it; if the object is a non-additive function
of ``(a, b, relation)``, such a model cannot represent the table, the expert MLPs must compute
it, and their width should bind.  Two codes: ``two-token-sparse``, q = ⌈√S⌉ for the S distinct
subjects of the dataset (all codes distinct; one relation's 50 subjects fill a small part of
the q × q grid, so a symbol rarely meets two subjects of the same relation), and ``two-token``,
q = ⌈√N⌉ for N pairs per relation (codes distinct within each relation: every relation fills
most of its grid, each symbol is shared by about q subjects of the same relation).

What limits the hypothesis (see "How to read the table").  For a relation with one object per
subject the table is additive after all: the score ``[a = a_o] + [b = b_o]`` of object o is 2
at o's own cell and at most 1 elsewhere, a linear read-out of the two symbols' features (the
unembedding row of o holds o's code).  Only objects shared by several subjects (continents,
languages, time zones) make the table non-additive; the table's two last columns separate them.

What it found when it was written (the numbers are in the JSON, with the commit): no regime of
the sweep meets the four criteria.  With either code the one-expert model is not resolvably
worse than the seven-expert task-routed one; where the experts are narrow enough to matter
(four neurons at ``d_model`` 32), one FFN holding all seven experts' neurons beats the
task-routed MoE -- the MoE's total neurons are not used as one pool, the active ones do not
bind -- and a sizeable part of the accuracy survives with every expert switched off (the facts
still sit in embeddings, attention and read-out: for one expert, most of them).  At
``d_model`` 16 the dense code is learnt late and suddenly (test accuracy still climbing at the
end of 1500 steps; the task-routed MoE had not started), and runs at ``d_model`` 32 cost more
than the 20 s budget on one thread.
The relations whose objects are shared are where the code costs accuracy; the dense FFN
recovers them, the task-routed MoE does not.

What stays the library's.  The data are the library's (``experiment_dataset`` of an
``ExperimentConfig``: the same relations, templates, pairs and sentence-level split); this script
only rewrites the token ids of the encoded splits (:func:`two_token_subjects`): the subject's
position gets symbol ``a``, a new position after it symbol ``b``, the rest of the sentence moves
one position to the right, and the vocabulary is compacted to the ids that occur (subject-only
entity tokens disappear; an entity that is also an object elsewhere keeps its token as an
object, which stays one atomic token, so one greedy step still completes it).  The model
(``MoETransformer``), the training loop (``build_and_train`` with the objectives ``ce`` and
``ce+router``), the exact-match evaluation and the convergence measurement (``convergence``)
are the library's, called as ``run_experiment`` calls them.  The ``one-token`` encoding runs the
very same code on the untouched ids (vocabulary compacted the same way): the baseline.

How to read the table.  One block per regime (facts per relation, ``d_model``, ``d_expert``,
steps) and encoding; rows: one expert (E=1), three and seven experts trained with the
task-router loss (``ce+router``), and the dense model with the seven experts' neurons in one
FFN (E=1 of width 7·d_expert).  Columns: test exact match (mean over seeds, 95 % interval:
:func:`moe_routing.experiments.accuracy_interval`, the larger of the seed spread and the
binomial error), training exact match (≤ 2000 training sentences: memorised at all?), how far
test accuracy moved over the last quarter of training (largest over seeds: :func:`convergence`),
the share of object-predicting positions that the router sends to the designated expert
``task mod E`` (did task routing happen?), active parameters per token, CPU seconds per run
(one thread: process time, which other jobs on a shared machine inflate less than wall time;
both are in the JSON), the test accuracy with every expert's output set to zero ("experts
off": close to the test accuracy means the experts do not hold the facts), and the test
accuracy over the relations with one object per subject ("1-to-1") and over those where
several subjects share an object ("shared").  Under each block, the four criteria:
(i) the E=1 interval lies entirely below the E=7 interval, (ii) the MoE rows (E=3, E=7) have
mean accuracy in [80 %, 95 %], (iii) no run moved by 2 pp or more over its last quarter, (iv)
the slowest row averages ≤ 20 CPU s per run.  A "–" is a measurement that a run cached before
it was added does not have (in the routing column: a model of one expert).

Runs are cached in ``build/capacity_probe/`` (keyed by the run, this script's data-transform
version, torch and the thread count; each records the library's training-code fingerprint, and
the JSON lists those of its rows), so a second call prints at once; the JSON
(``benchmarks/results/capacity_probe.json`` by default, written atomically) holds every row, the
criteria and the commit.  ``--quick`` trains a tiny version (one seed, few steps, two models) to
check that the script works; it writes beside the cache, never over the results file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from moe_routing._internal.atomic import atomic_write_json
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.accuracy import accuracy_interval
from moe_routing.experiments.task_routing.runs import convergence
from moe_routing.experiments.task_routing.runs import EVAL_POINTS
from moe_routing.experiments.task_routing.config import code_fingerprint
from moe_routing.experiments.task_routing.data import experiment_dataset
from moe_routing.model import (IGNORE_INDEX, TrainData, build_and_train,
                               collect_routing, exact_match, parameter_count)
from moe_routing._internal.runtime import git_commit
from moe_routing._internal.validation import choice, integer, require

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "capacity_probe"

#: bump when the data transform or what a run records changes (part of every cache key)
PROBE_VERSION = 1

#: ``one-token``: the library's ids; ``two-token-sparse``: subjects as codes over ⌈√S⌉ symbols
#: (S distinct subjects of the whole dataset: each relation fills a small part of the grid);
#: ``two-token``: codes over ⌈√N⌉ symbols (N pairs per relation: each relation fills its grid)
ENCODINGS = ("one-token", "two-token-sparse", "two-token")

#: shared by every run: the chapter's default profile (K = 20 tasks of the 50-relation pool)
COMMON = dict(n_tasks=20, n_relations=50, n_templates=5, n_heads=2, batch_size=128, lr=0.01)

#: (name, n_experts, width multiplier of d_expert, objective)
MODELS = {
    "E=1": (1, 1, "ce"),
    "E=3 task-routed": (3, 1, "ce+router"),
    "E=7 task-routed": (7, 1, "ce+router"),
    "dense, 7x neurons": (1, 7, "ce"),
}


@dataclass(frozen=True)
class Regime:
    """Sizes of one block of the table and which of its runs are trained."""

    label: str
    n_pairs: int
    d_model: int
    d_expert: int
    steps: int
    models: tuple[str, ...] = tuple(MODELS)
    encodings: tuple[str, ...] = ENCODINGS
    seeds: tuple[int, ...] = (0, 1)


#: the sweep, in the order it was run: a scan with one seed (E=1 against E=7, two-token codes
#: only), then the full block of the one candidate it found, and the one-token baseline there
REGIMES = [
    Regime("sparse scan: 50 pairs, d 16, f 32", 50, 16, 32, 1500, ("E=1", "E=7 task-routed"),
           ("two-token-sparse",), (0,)),
    Regime("sparse scan: 50 pairs, d 32, f 16", 50, 32, 16, 1500, ("E=1",),
           ("two-token-sparse",), (0,)),
    Regime("scan: 50 pairs, d 16, f 32", 50, 16, 32, 1500, ("E=1", "E=7 task-routed"),
           ("two-token",), (0,)),
    Regime("scan: 50 pairs, d 32, f 16", 50, 32, 16, 1500, ("E=1", "E=7 task-routed"),
           ("two-token",), (0,)),
    Regime("50 pairs, d 32, f 4", 50, 32, 4, 1500, tuple(MODELS), ("two-token",), (0, 1)),
    Regime("baseline: 50 pairs, d 32, f 4", 50, 32, 4, 1500, ("E=1", "E=7 task-routed"),
           ("one-token",), (0, 1)),
]

QUICK = [Regime("quick: 20 pairs, d 16, f 8", 20, 16, 8, 200, ("E=1", "E=7 task-routed"),
                ENCODINGS, (0,))]


# ----------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Encoded:
    """One split as the model sees it: tokens (M, n), object_pos (M,), task (M,), lengths (M,)."""

    tokens: torch.Tensor
    object_pos: torch.Tensor
    task: torch.Tensor
    lengths: torch.Tensor

    def train_data(self) -> TrainData:
        """Next-token data with a loss at every input position from BOS to the last word (the
        one that predicts EOS), as the library's ``EncodedSplit.targets_masked``."""
        inputs, targets = self.tokens[:, :-1], self.tokens[:, 1:]
        inside = torch.arange(inputs.shape[1])[None, :] < (self.lengths[:, None] - 1)
        return TrainData(inputs.contiguous(), targets.masked_fill(~inside, IGNORE_INDEX)
                         .contiguous(), self.task)

    def objects(self) -> torch.Tensor:
        return self.tokens[torch.arange(len(self.tokens)), self.object_pos]


def _check_loss_mask(split) -> None:
    """The library's loss mask is "inside the sentence" (what :meth:`Encoded.train_data`
    rebuilds after the rewrite); refuse to go on if that ever stops being true."""
    inside = torch.arange(split.inputs.shape[1])[None, :] < (split.lengths[:, None] - 1)
    require(bool(torch.equal(inside, split.loss_mask)), "EncodedSplit.loss_mask",
            "not the positions before each sentence's EOS",
            "the mask this script rebuilds for the rewritten sentences")


def subject_codes(ds, dense: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Every distinct subject entity id of ``ds`` and its code: ``(subjects (S,), codes (S, 2),
    q)``, codes in ``[0, q)²`` drawn with ``seed``, one per entity (the same in every relation).

    ``dense=False``: q = ⌈√S⌉ and all S codes distinct.  ``dense=True``: q = ⌈√N⌉ (N the
    largest dictionary) and codes distinct only within each relation, so each relation's
    dictionary covers most of its q × q grid; entities are coded in decreasing order of the
    number of relations they are a subject of, each drawing a cell free in all of them (q grows
    by one if some entity finds none).
    """
    dicts = [ds.dictionary_ids(k)[:, 0] for k in range(ds.n_tasks)]
    subjects = np.unique(np.concatenate(dicts))
    rng = np.random.default_rng(seed)
    if not dense:
        q = math.ceil(math.sqrt(len(subjects)))
        flat = rng.permutation(q * q)[:len(subjects)]
        return subjects, np.stack([flat // q, flat % q], 1), q
    member = {int(e): [k for k, d in enumerate(dicts) if e in set(d.tolist())] for e in subjects}
    order = sorted(member, key=lambda e: (-len(member[e]), e))
    q = math.ceil(math.sqrt(max(len(d) for d in dicts)))
    while True:
        used = np.zeros((ds.n_tasks, q * q), dtype=bool)
        code: dict[int, int] = {}
        for e in order:
            free = np.flatnonzero(~used[member[e]].any(0))
            if not len(free):
                break
            code[e] = int(rng.choice(free))
            used[member[e], code[e]] = True
        if len(code) == len(order):
            flat = np.array([code[int(e)] for e in subjects])
            return subjects, np.stack([flat // q, flat % q], 1), q
        q += 1


def two_token_subjects(ds, encoding: str, seed: int = 0) -> tuple[Encoded, Encoded, int, dict]:
    """The train and test splits of ``ds`` in ``encoding``, the vocabulary size and a summary.

    ``two-token`` and ``two-token-sparse``: the subject token at ``subject_pos`` becomes
    ``A[a]``, a new position after it ``B[b]`` (``(a, b)`` the subject's code,
    :func:`subject_codes`, dense for ``two-token``), later tokens move right by one.
    ``one-token``: the ids unchanged.  All three: ids compacted to those that occur in some
    sentence (PAD kept: it is the padding id), order preserved.  Two invariants are checked:
    the library's loss mask is the one :meth:`Encoded.train_data` rebuilds, and every sentence
    keeps its object (a rewrite that misplaced it would train on wrong answers silently).
    """
    choice("encoding", encoding, ENCODINGS)
    V = ds.vocab_size
    splits = {s: ds.encode_split(s) for s in ("train", "test")}
    for s in splits.values():
        _check_loss_mask(s)
    info: dict = {}
    out = {}
    two = encoding != "one-token"
    if two:
        subjects, codes, q = subject_codes(ds, encoding == "two-token", seed)
        lookup = np.full(V, -1, dtype=np.int64)
        lookup[subjects] = np.arange(len(subjects))
        a_ids, b_ids = V + np.arange(q), V + q + np.arange(q)          # two new sub-vocabularies
        info.update(n_subjects=len(subjects), code_symbols=q, code_vocab=2 * q)
    for name, s in splits.items():
        tok, sp, op = s.tokens.numpy(), s.subject_pos.numpy(), s.object_pos.numpy()
        ln = s.lengths.numpy()
        if two:
            M, n = tok.shape
            rows = np.arange(M)
            src = np.arange(n + 1)[None, :] - (np.arange(n + 1)[None, :] > sp[:, None])
            new = tok[rows[:, None], src]                               # (M, n+1), shifted
            require(bool((lookup[tok[rows, sp]] >= 0).all()), "subject tokens", "unknown id",
                    "ids of dictionary subjects")
            code = codes[lookup[tok[rows, sp]]]                         # (M, 2)
            new[rows, sp], new[rows, sp + 1] = a_ids[code[:, 0]], b_ids[code[:, 1]]
            tok, op, ln = new, op + (op > sp), ln + 1
        out[name] = (tok, op, s.task.numpy(), ln, s.tokens.numpy()[np.arange(len(s)),
                                                                    s.object_pos.numpy()])
    used = np.unique(np.concatenate([o[0].ravel() for o in out.values()] + [np.array([0])]))
    remap = np.full(int(used.max()) + 1, -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    enc = {k: Encoded(torch.from_numpy(remap[t]), torch.from_numpy(op), torch.from_numpy(task),
                      torch.from_numpy(ln)) for k, (t, op, task, ln, _) in out.items()}
    for k, (*_, objects) in out.items():          # the objects survive the rewrite unchanged
        require(bool(torch.equal(enc[k].objects(), torch.from_numpy(remap[objects]))),
                f"{k} objects after the rewrite", "changed", "the dataset's objects")
    info.update(vocab_size=len(used), seq_len=int(enc["train"].tokens.shape[1]))
    return enc["train"], enc["test"], len(used), info


# ----------------------------------------------------------------------------- one run
def run_spec(regime: Regime, model: str, encoding: str, seed: int) -> dict:
    """What determines one run (hashed into its cache key)."""
    e, mult, objective = MODELS[choice("model", model, tuple(MODELS))]
    return dict(encoding=choice("encoding", encoding, ENCODINGS), n_pairs=regime.n_pairs,
                d_model=regime.d_model, n_experts=e, d_expert=regime.d_expert * mult,
                objective=objective, steps=regime.steps, seed=integer("seed", seed, low=0),
                **COMMON)


def run_key(spec: dict) -> str:
    """Cache key of a run: its spec, this script's version, torch and the thread count.

    Not the library's code fingerprint: this checkout is edited while a sweep runs, and an edit
    elsewhere in the training code (a data-source loader this script never calls) would retrain
    every run.  Each result records the fingerprint it was computed under instead, and the JSON
    lists the fingerprints its rows come from: one value means one version of the library."""
    blob = json.dumps({"probe": PROBE_VERSION, "torch": torch.__version__,
                       "threads": torch.get_num_threads(), **spec}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def train_run(spec: dict) -> dict:
    """Train and measure one run of ``spec`` (as ``run_experiment`` does, on rewritten ids)."""
    t0, c0 = time.perf_counter(), time.process_time()
    cfg = ExperimentConfig.from_flat(**{k: spec[k] for k in (
        "n_tasks", "n_experts", "objective", "seed", "n_relations", "n_pairs", "n_templates",
        "d_model", "n_heads", "d_expert", "steps", "batch_size", "lr")})
    ds = experiment_dataset(cfg)
    tr, te, vocab, info = two_token_subjects(ds, spec["encoding"])
    data = tr.train_data()
    mcfg = cfg.model.config(vocab_size=vocab, max_len=data.inputs.shape[1], top_k=1,
                            gate="switch")
    tcfg = cfg.loop_config("cpu")

    def test_accuracy(m) -> dict:
        return {"accuracy": exact_match(m, te.tokens, te.object_pos, te.objects()).accuracy}

    model, hist = build_and_train(mcfg, data, tcfg, eval_fn=test_accuracy,
                                  eval_every=max(1, cfg.steps // EVAL_POINTS))
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        em = exact_match(model, te.tokens, te.object_pos, te.objects())
        acc = em.accuracy
        per_task = (np.bincount(te.task.numpy(), weights=em.correct.numpy().astype(float),
                                minlength=ds.n_tasks)
                    / np.maximum(np.bincount(te.task.numpy(), minlength=ds.n_tasks), 1))
        # where do the facts live?  The same test with every expert's output replaced by 0
        # (the residual stream keeps embeddings + attention): near ``accuracy`` means the
        # experts do not hold the lookup
        with model.knocked_out(range(cfg.n_experts), "zero"):
            acc_off = exact_match(model, te.tokens, te.object_pos, te.objects()).accuracy
        n_tr = min(len(tr.tokens), 2000)
        acc_tr = exact_match(model, tr.tokens[:n_tr], tr.object_pos[:n_tr],
                             tr.objects()[:n_tr]).accuracy
        at_object = torch.zeros(te.tokens.shape[0], te.tokens.shape[1] - 1, dtype=torch.bool)
        at_object[torch.arange(len(te.tokens)), te.object_pos - 1] = True
        rec = collect_routing(model, te.tokens[:, :-1], te.task, at_object)
        designated = float((rec.expert[:, 0] == rec.task % cfg.n_experts).float().mean())
    pc = parameter_count(mcfg)
    # one object per subject (injective dictionary) or objects shared by several subjects:
    # only the latter make the answer a non-additive function of the code (see the report)
    injective = [bool(len(np.unique(ds.dictionary_ids(k)[:, 1])) == ds.tasks[k].n_pairs)
                 for k in range(ds.n_tasks)]
    res = dict(spec=spec, accuracy=acc, train_accuracy=acc_tr,
               accuracy_per_task=per_task.tolist(), injective_task=injective,
               accuracy_experts_off=acc_off, n_test=int(len(te.tokens)),
               n_train=int(len(tr.tokens)), designated_at_object=designated,
               history=dict(step=hist.step, ce=hist.ce, evals=hist.evals), steps=cfg.steps,
               params=dict(active=pc.active, total=pc.total, experts_active=pc.experts_active,
                           embeddings=pc.embeddings), data=info, train_s=train_s,
               wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    res["convergence"] = convergence(res)
    res["code_fingerprint"] = code_fingerprint()
    return res


def cached_run(spec: dict, log) -> dict:
    path = CACHE / f"{run_key(spec)}.json"
    if path.exists():
        try:
            res = json.loads(path.read_text())
            if res.get("spec") == spec:
                return res
        except (OSError, json.JSONDecodeError):
            pass
        log(f"  cached file {path} is unusable: re-running")
    res = train_run(spec)
    atomic_write_json(path, res)
    return res


# ----------------------------------------------------------------------------- table
def _mean_of(results: list[dict], get) -> float | None:
    """Mean of ``get(r)`` over the runs; None when a run predates the measurement."""
    try:
        return float(np.mean([get(r) for r in results]))
    except KeyError:
        return None


def _task_mean(r: dict, injective: bool) -> float:
    """Test accuracy averaged over the relations whose dictionary is (not) injective."""
    acc = [a for a, inj in zip(r["accuracy_per_task"], r["injective_task"]) if inj == injective]
    return float(np.mean(acc)) if acc else float("nan")


def regime_rows(regime: Regime, log) -> list[dict]:
    rows = []
    for encoding in regime.encodings:
        for model in regime.models:
            res = []
            for seed in regime.seeds:
                spec = run_spec(regime, model, encoding, seed)
                t = time.perf_counter()
                r = cached_run(spec, log)
                log(f"  {regime.label} | {encoding} | {model} | seed {seed}: test "
                    f"{100 * r['accuracy']:.1f} %, train {100 * r['train_accuracy']:.1f} %, "
                    f"{r['cpu_s']:.1f} CPU s/run ({time.perf_counter() - t:.1f} s now)")
                res.append(r)
            iv = accuracy_interval([r["accuracy"] for r in res], [r["n_test"] for r in res])
            rows.append(dict(
                regime=regime.label, encoding=encoding, model=model,
                n_pairs=regime.n_pairs, d_model=regime.d_model,
                n_experts=res[0]["spec"]["n_experts"], d_expert=res[0]["spec"]["d_expert"],
                objective=res[0]["spec"]["objective"], steps=regime.steps,
                seeds=list(regime.seeds), accuracies=[r["accuracy"] for r in res],
                accuracy=iv.mean, accuracy_low=iv.low, accuracy_high=iv.high,
                interval_from=iv.source,
                train_accuracy=float(np.mean([r["train_accuracy"] for r in res])),
                acc_change_last_quarter=float(max(abs(r["convergence"]["acc_change"])
                                                  for r in res)),
                ce_drop=float(max(r["convergence"]["ce_drop"] for r in res)),
                designated_at_object=float(np.mean([r["designated_at_object"] for r in res])),
                active_params=float(res[0]["params"]["active"]),
                total_params=float(res[0]["params"]["total"]),
                accuracy_experts_off=_mean_of(res, lambda r: r["accuracy_experts_off"]),
                accuracy_injective=_mean_of(res, lambda r: _task_mean(r, True)),
                accuracy_shared_objects=_mean_of(res, lambda r: _task_mean(r, False)),
                facts=int(res[0]["n_test"]), vocab_size=res[0]["data"]["vocab_size"],
                code_fingerprints=sorted({r["code_fingerprint"] for r in res}),
                wall_s=float(np.mean([r["wall_s"] for r in res])),
                cpu_s=float(np.mean([r["cpu_s"] for r in res]))))
    return rows


def criteria(rows: list[dict]) -> dict:
    """(i)–(iv) of the module docstring for one regime and encoding (None: not measurable)."""
    by = {r["model"]: r for r in rows}
    e1, e7 = by.get("E=1"), by.get("E=7 task-routed")
    moe = [r for m, r in by.items() if m in ("E=3 task-routed", "E=7 task-routed")]
    return dict(
        i_experts_matter=None if not (e1 and e7) else bool(e1["accuracy_high"]
                                                          < e7["accuracy_low"]),
        ii_moe_in_80_95=None if not moe else bool(all(0.80 <= r["accuracy"] <= 0.95
                                                      for r in moe)),
        iii_converged=bool(all(r["acc_change_last_quarter"] < 0.02 for r in rows)),
        iv_at_most_20_s=bool(max(r["cpu_s"] for r in rows) <= 20.0),
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def print_block(rows: list[dict], crit: dict) -> None:
    r0 = rows[0]
    print(f"\n{r0['regime']} — {r0['encoding']} (vocabulary {r0['vocab_size']}, "
          f"{r0['facts']} test sentences, seeds {r0['seeds']})")
    print(f"  {'model':<20} {'test EM (95 % interval)':>24} {'train EM':>9} {'moving':>7} "
          f"{'to task mod E':>13} {'active':>8} {'CPU s':>6} {'experts off':>11} "
          f"{'1-to-1 / shared':>15}")
    for r in rows:
        print(f"  {r['model']:<20} {100 * r['accuracy']:>8.1f} ({100 * r['accuracy_low']:5.1f}–"
              f"{100 * r['accuracy_high']:5.1f}) {100 * r['train_accuracy']:>9.1f} "
              f"{100 * r['acc_change_last_quarter']:>7.1f} "
              f"{_pct(r['designated_at_object'] if r['n_experts'] > 1 else None):>13} "
              f"{r['active_params'] / 1e3:>7.1f}k "
              f"{r['cpu_s']:>6.1f} {_pct(r['accuracy_experts_off']):>11} "
              f"{_pct(r['accuracy_injective']):>7}/{_pct(r['accuracy_shared_objects']):<7}")
    print("  criteria: " + ", ".join(f"{k}={v}" for k, v in crit.items()))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a tiny version (one seed, 200 steps, two models): checks the script")
    ap.add_argument("--only", action="append", default=[],
                    help="train only the regimes whose label contains this text (repeatable)")
    ap.add_argument("--out", default=None, help="the JSON to write (default: "
                    "benchmarks/results/capacity_probe.json; with --quick, beside the cache)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    regimes = QUICK if args.quick else REGIMES
    if args.only:
        regimes = [r for r in regimes if any(s in r.label for s in args.only)]
        require(bool(regimes), "--only", args.only, "text in some regime label: "
                + "; ".join(r.label for r in (QUICK if args.quick else REGIMES)))
    out = Path(args.out) if args.out else (CACHE / "capacity_probe_quick.json" if args.quick
                                           else ROOT / "benchmarks" / "results"
                                           / "capacity_probe.json")
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    blocks = []
    for regime in regimes:
        log(f"{regime.label}: {len(regime.models) * len(regime.encodings) * len(regime.seeds)} "
            f"runs ({time.perf_counter() - t0:.0f} s so far)")
        rows = regime_rows(regime, log)
        for encoding in regime.encodings:
            sub = [r for r in rows if r["encoding"] == encoding]
            blocks.append(dict(regime=asdict(regime), encoding=encoding, rows=sub,
                               criteria=criteria(sub)))
    for b in blocks:
        print_block(b["rows"], b["criteria"])
    wall = time.perf_counter() - t0
    print(f"\n{wall:.0f} s (cached runs are read, not retrained)")
    fingerprints = sorted({fp for b in blocks for r in b["rows"] for fp in r["code_fingerprints"]})
    if len(fingerprints) > 1:
        print(f"note: the runs come from {len(fingerprints)} versions of the library's training "
              f"code ({', '.join(fingerprints)}); this one is {code_fingerprint()}")
    atomic_write_json(out, dict(commit=git_commit(ROOT), probe_version=PROBE_VERSION,
                                code_fingerprint=code_fingerprint(),
                                run_code_fingerprints=fingerprints, common=COMMON,
                                models={k: dict(n_experts=e, d_expert_multiplier=m, objective=o)
                                        for k, (e, m, o) in MODELS.items()},
                                threads=1, blocks=blocks, wall_s=wall,
                                runs_wall_s=sum(r["wall_s"] * len(r["seeds"])
                                                for b in blocks for r in b["rows"]),
                                runs_cpu_s=sum(r["cpu_s"] * len(r["seeds"])
                                               for b in blocks for r in b["rows"]),
                                argv=sys.argv[1:] if argv is None else list(argv)))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
