"""The CUDA path of the training code.

Tests marked ``cuda`` need a GPU: they are skipped without one ('needs a CUDA GPU') and run by
``make gpu-check`` (``pytest -m cuda``).  The others check here, on the CPU, what the CUDA path
changed: the data order (drawn on the CPU, sliced on the device), the training history (the
loop as it was, rebuilt below, gives bit-identical results), the TF32 scope, the non-finite
check, and ``scripts/gpu_check.py`` (its refusal without CUDA, its logic on the CPU).

Tolerances of the GPU tests are derived in the tests; the GPU's float32 runs with TF32 off
(``float32_matmul_precision("highest")``): TF32 keeps a 10-bit mantissa (relative error about
5e-4), which no float32 tolerance here would admit.
"""

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_routing.model import (IGNORE_INDEX, MoEConfig, MoETransformer, TrainConfig,
                               build_and_train, exact_match, objective_loss, train)
from moe_routing.model.dispatch import dispatch, grouped_mm_available
from moe_routing.model.train import _lr_at, batch_order, float32_matmul_precision
from moe_routing._internal.runtime import provenance, seed_everything
from test_model_train import lookup_data, small_cfg, train_data

TRAIN_LOOP = importlib.import_module("moe_routing.model.train")

pytestmark = pytest.mark.kernels

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = ROOT / "scripts" / "gpu_check.py"
HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


@pytest.fixture
def strict_fp32():
    """float32 matmuls in float32 (no TF32) for the test, the previous setting restored."""
    with float32_matmul_precision("highest"):
        yield


def assert_close_to_scale(got: torch.Tensor, ref: torch.Tensor, rel: float, what: str) -> None:
    """``max |got − ref| ≤ rel · max |ref|`` (errors measured against the tensor's scale: an
    entry near zero is the sum of terms of that scale, so its rounding is of that scale too)."""
    got = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    err = float((got - ref).abs().max()) if ref.numel() else 0.0
    assert err <= rel * scale + 1e-12, f"{what}: max error {err:.3g} > {rel:g} × scale {scale:.3g}"


# ----------------------------------------------------------------------------- on the CPU
def old_batches(n, batch_size, total, gen):
    """The data order exactly as the loop drew it before: a permutation drawn before the first
    step, a new one whenever the cursor passed the end, a slice per step."""
    perm, cursor, out = torch.randperm(n, generator=gen), 0, []
    for _ in range(total):
        if cursor >= n:
            perm, cursor = torch.randperm(n, generator=gen), 0
        out.append(perm[cursor:cursor + batch_size])
        cursor += batch_size
    return out


@pytest.mark.parametrize("n,batch_size,steps", [(48, 16, 12), (48, 7, 25), (10, 64, 5),
                                                (13, 13, 4), (5, 2, 1), (9, 9, 1)])
def test_batch_order_is_the_old_per_step_slicing(n, batch_size, steps):
    g_old, g_new = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    want = old_batches(n, batch_size, steps, g_old)
    got = list(batch_order(n, batch_size, steps, g_new))
    assert len(got) == steps
    for s, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), s
    # the same number of draws: the generators are in the same state afterwards
    assert torch.equal(torch.randperm(n, generator=g_old), torch.randperm(n, generator=g_new))


def test_batch_order_refuses_bad_arguments():
    g = torch.Generator()
    with pytest.raises(ValueError, match="batch_size"):
        next(batch_order(5, 0, 1, g))
    with pytest.raises(ValueError, match="generator"):
        next(batch_order(5, 2, 1, 0))


def old_loop(model, data, cfg):
    """The training loop as it was (CPU, no evaluation): per-step CPU slices, ``as_floats`` at
    logged steps.  The loop under test must give bit-identical histories and weights: on the
    CPU the device changes must not change a single rounding.  Its cross-entropy is the one
    the loop takes on a CPU (factored logits, ``FACTORED_LOGITS_ON_CPU``): the test is about
    the loop's plumbing; the two CEs are compared in test_model_layers and test_losses."""
    n, total = len(data), cfg.total_steps(len(data))
    opt = torch.optim.AdamW(model.param_groups(cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98),
                            foreach=True)
    gen = torch.Generator().manual_seed(cfg.seed)
    perm, cursor, hist = torch.randperm(n, generator=gen), 0, {"step": [], "total": [], "ce": [],
                                                               "lb": [], "router": [], "lr": []}
    model.train()
    for step in range(total):
        if cursor >= n:
            perm, cursor = torch.randperm(n, generator=gen), 0
        idx = perm[cursor:cursor + cfg.batch_size]
        cursor += cfg.batch_size
        lr = _lr_at(cfg, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        tgt = data.targets[idx]
        real = tgt != IGNORE_INDEX
        out = model(data.inputs[idx], logits_mask=real,
                    factored_logits=TRAIN_LOOP.FACTORED_LOGITS_ON_CPU)
        parts = objective_loss(cfg.objective, out.logits, tgt, out.router_logits,
                               out.router_probs, out.expert_index, data.task_ids[idx], None,
                               lb_alpha=cfg.lb_alpha, router_alpha=cfg.router_alpha,
                               z_beta=cfg.z_beta)
        opt.zero_grad(set_to_none=True)
        parts.total.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        opt.step()
        if step % cfg.log_every == 0 or step == total - 1:
            vals = parts.as_floats()
            hist["step"].append(step)
            for key in ("total", "ce", "lb", "router"):
                hist[key].append(vals[key])
            hist["lr"].append(lr)
    return hist


@pytest.mark.parametrize("objective,steps,batch_size,log_every", [
    ("ce+lb", 25, 7, 1), ("ce+router", 20, 10, 3), ("ce", 9, 100, 4)])
def test_cpu_training_is_bit_identical_to_the_old_loop(objective, steps, batch_size, log_every):
    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    cfg = TrainConfig(objective=objective, steps=steps, batch_size=batch_size,
                      log_every=log_every, z_beta=1e-3, seed=3, progress=False, device="cpu")
    seed_everything(cfg.seed)
    ref_model = MoETransformer(small_cfg(v))
    ref = old_loop(ref_model, data, cfg)
    model, hist = build_and_train(small_cfg(v), data, cfg)
    for key, values in ref.items():
        assert getattr(hist, key) == values, key
    for (name, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_tf32_is_scoped_and_recorded():
    before = torch.get_float32_matmul_precision()
    with float32_matmul_precision("high"):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(RuntimeError, match="inside"):
        with float32_matmul_precision("medium"):
            raise RuntimeError("inside")
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(ValueError, match="precision"):
        with float32_matmul_precision("low"):
            pass
    # on the CPU: no TF32, whatever amp says; an explicit choice is kept; the dict round-trips
    cfg = TrainConfig(steps=3, batch_size=16, progress=False, device="cpu", amp=True)
    assert cfg.tf32 is False and cfg.as_dict()["tf32"] is False
    assert TrainConfig(**cfg.as_dict()) == cfg
    assert TrainConfig(**{**cfg.as_dict(), "tf32": True}).tf32 is True
    with pytest.raises(ValueError, match="tf32"):
        TrainConfig(steps=1, device="cpu", tf32="yes")
    seq, tasks, v = lookup_data()
    seen = []

    def look(_model):
        seen.append(torch.get_float32_matmul_precision())
        return {}

    _, hist = build_and_train(small_cfg(v), train_data(seq, tasks),
                              TrainConfig(**{**cfg.as_dict(), "tf32": True}), eval_fn=look)
    assert hist.tf32 is False and hist.device == "cpu"
    assert seen == [before] and torch.get_float32_matmul_precision() == before


def test_non_finite_loss_names_its_first_step_between_logged_steps():
    # the weights become NaN after step 2 (an evaluation poisons them); the loss is logged at
    # steps 0 and 5 only: the error names step 3, noted on the device when it happened
    seq, tasks, v = lookup_data()

    def poison(m):
        m.unembed.weight.fill_(math.nan)
        return {}

    cfg = TrainConfig(steps=8, batch_size=16, log_every=5, progress=False, device="cpu")
    with pytest.raises(FloatingPointError, match="loss became nan at step 3 "):
        build_and_train(small_cfg(v), train_data(seq, tasks), cfg, eval_fn=poison,
                        eval_every=3)


def run_gpu_check(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, str(GPU_CHECK), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.skipif(HAS_CUDA, reason="the refusal needs a machine without CUDA")
def test_gpu_check_refuses_without_cuda(tmp_path):
    res = run_gpu_check("--out", str(tmp_path))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "CUDA" in lines[0] and "--device cpu" in lines[0], res.stderr
    assert res.stdout == "" and not any(tmp_path.iterdir())


def test_gpu_check_refuses_bad_arguments_before_work(tmp_path):
    res = run_gpu_check("--device", "cpu", "--probe-steps", "0", "--out", str(tmp_path))
    assert res.returncode == 2 and "--probe-steps" in res.stderr
    assert not any(tmp_path.iterdir())


def paper_grid_runs() -> tuple[int, int]:
    """(runs, steps per run) of the paper profile's training chapter, counted by hand from its
    parameters: one-expert cells are shared by the three objectives, Figure 2's cell is one of
    the grid's, plus one dense reference per seed and the six broken variants of the rules'
    power table (``rule_power``); with ``codes_variant``, the fixed-code variant's three
    objectives per seed, and with ``controls`` its four controls of the task-router run.
    The third number is the steps of them all (the variant's runs train their own)."""
    from moe_book import project as pl

    p = pl.load_params(pl.Project(ROOT), "paper")["training"]
    seeds, tasks, experts = len(p["seeds"]), p["grid_tasks"], p["grid_experts"]
    ones = sum(e == 1 for e in experts)
    grid = len(tasks) * (ones + 3 * (len(experts) - ones)) * seeds
    fig2_in_grid = p["fig2_tasks"] in tasks and p["fig2_experts"] in experts
    variant = 3 * seeds if p.get("codes_variant") is not None else 0
    controls = 4 * seeds if variant and p.get("controls") else 0
    own = (variant + controls) * (p["codes_variant"] or {}).get("steps", p["steps"])
    learned = grid + (0 if fig2_in_grid else 3) + seeds + (6 if p["rule_power"] else 0)
    # the power table's "stopped early" run trains a tenth of the steps
    early = p["steps"] - max(8, p["steps"] // 10) if p["rule_power"] else 0
    return learned + variant + controls, p["steps"], learned * p["steps"] - early + own


def test_gpu_check_quick_on_the_cpu(tmp_path):
    res = run_gpu_check("--device", "cpu", "--quick", "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]         # no temporary left
    assert report["device"] == "cpu" and report["quick"] is True
    assert report["cuda_tests"]["ran"] is False
    probes = report["probes"]
    assert {p["kind"] for p in probes} == {"fewest tasks", "most tasks", "dense"}
    for p in probes:
        assert p["steps"] > 0 and p["steps_per_s"] == pytest.approx(p["steps"] / p["train_s"])
        assert p["eval_s"] > 0 and p["exact_match_s"] > 0
    proj = report["projection"]
    runs, steps, all_steps = paper_grid_runs()
    assert proj["n_runs"] == runs and proj["steps_per_run"] == steps
    assert sum(proj["runs_by_kind"].values()) == runs
    assert proj["projected_s"] == pytest.approx(sum(r["projected_s"] for r in proj["runs"]))
    slowest = min(p["steps_per_s"] for p in probes)
    assert proj["upper_bound_train_s"] == pytest.approx(all_steps / slowest)
    assert "projected" in res.stdout and str(runs) in res.stdout


def test_gpu_check_times_the_chapters_own_runs():
    """The probes are runs of the chapter's plan (entity codes, controls and schedule as the
    chapter trains them), only moved to the device: a knob cannot drift between the two (the
    paper profile's runs include the fixed-code arm, which the projection counts)."""
    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    params = gpu_check.load_training_params(ROOT / "notebooks" / "params" / "paper.yaml")
    runs = gpu_check.grid_runs(params)
    probes = gpu_check.probe_plan(params, quick=False, device="cuda")
    assert [kind for kind, _, _ in probes] == ["fewest tasks", "most tasks", "dense"]
    for _kind, _corner, cfg in probes:
        assert cfg.device == "cuda" and cfg.replace(device=runs[0].device) in runs
    codes = params["codes_variant"]["entity_codes"]
    assert any(c.entity_codes == codes and c.steps == params["codes_variant"]["steps"]
               for c in runs)
    # quick: smaller sizes, the chapter's other knobs kept
    for (_, _, full), (_, _, small) in zip(probes, gpu_check.probe_plan(params, True, "cpu")):
        assert small.entity_codes == full.entity_codes and small.steps == full.steps
        assert small.n_pairs < full.n_pairs


# ----------------------------------------------------------------------------- on the GPU
def pair_of_models(seed: int, objective_cfg: dict):
    """The same weights as a CPU float64 model and a CUDA float32 model."""
    cfg = MoEConfig(vocab_size=37, max_len=12, d_model=32, n_heads=4, n_experts=4, d_expert=32,
                    **objective_cfg)
    torch.manual_seed(seed)
    ref = MoETransformer(cfg).double()
    with torch.no_grad():
        ref.router.weight.normal_(0, 0.5)     # routing spread over the experts, wide margins
    gpu = MoETransformer(cfg)
    gpu.load_state_dict(ref.state_dict())     # rounded once to float32
    return ref, gpu.cuda()


def loss_and_grads(model, idx, targets, tasks, objective):
    model.zero_grad(set_to_none=True)
    real = targets != IGNORE_INDEX
    out = model(idx, logits_mask=real)
    parts = objective_loss(objective, out.logits, targets, out.router_logits, out.router_probs,
                           out.expert_index, tasks, lb_alpha=0.01, z_beta=1e-3)
    parts.total.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out, parts, grads


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("objective", ["ce+lb", "ce+router"])
@pytest.mark.parametrize("model_kw", [{}, {"top_k": 2, "gate": "renormalised"}])
def test_forward_backward_on_cuda_float32_match_cpu_float64(strict_fp32, objective, model_kw):
    # Tolerance: float32's unit roundoff u = 6e-8; a sum of K terms errs by at most about K·u
    # of the sum of their magnitudes (K ≤ 32 in the forward's matmuls, ≤ 96 = the tokens summed
    # in a weight gradient).  Through the layer's few steps that stays below 2e-5 (forward) and
    # 1e-4 (gradients) of each tensor's largest entry (CPU float32 measured: ≤ 3e-7 and 5e-7);
    # TF32 (≈5e-4 per product) fails the forward check, and a mis-routed token or a dropped term
    # fails both.  The float64 CPU model rounds at 1e-16: the reference.
    ref, gpu = pair_of_models(0, model_kw)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 37, (8, 12), generator=g)
    targets = torch.randint(0, 37, (8, 12), generator=g)
    targets[:, 9:] = IGNORE_INDEX                                         # padding
    tasks = torch.randint(0, 5, (8,), generator=g)
    out_r, parts_r, grads_r = loss_and_grads(ref, idx, targets, tasks, objective)
    # precondition: no near-tie in routing (float32 rounding, ~1e-6, cannot flip a choice)
    top = out_r.router_probs.topk(model_kw.get("top_k", 1) + 1, dim=-1).values
    assert float((top[..., :-1] - top[..., 1:]).min()) > 1e-4
    out_g, parts_g, grads_g = loss_and_grads(gpu, idx.cuda(), targets.cuda(), tasks.cuda(),
                                             objective)
    assert torch.equal(out_g.expert_index.cpu(), out_r.expert_index)
    for name in ("logits", "router_logits", "router_probs", "gate"):
        assert_close_to_scale(getattr(out_g, name), getattr(out_r, name), 2e-5, name)
    for name in parts_r._fields:
        assert_close_to_scale(getattr(parts_g, name), getattr(parts_r, name), 2e-5, name)
    assert grads_g.keys() == grads_r.keys()
    for name, gr in grads_r.items():
        assert_close_to_scale(grads_g[name], gr, 1e-4, f"grad {name}")


BACKENDS = ("sorted", "grouped", "loop", "dense")


def dispatch_case(device, dtype, seed=0, n=300, d=32, f=32, e=5, k=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    expert_index = torch.rand(n, e, generator=g).topk(k, dim=-1).indices   # distinct per row
    gate = torch.rand(n, k, generator=g, dtype=torch.float64)
    w1 = torch.randn(e, d, f, generator=g, dtype=torch.float64) / math.sqrt(d)
    b1 = torch.randn(e, f, generator=g, dtype=torch.float64) * 0.1
    w2 = torch.randn(e, f, d, generator=g, dtype=torch.float64) / math.sqrt(f)
    b2 = torch.randn(e, d, generator=g, dtype=torch.float64) * 0.1
    leaves = [t.to(device, dtype).requires_grad_() for t in (x, gate, w1, b1, w2, b2)]
    return leaves, expert_index.to(device)


def run_dispatch(backend, device, dtype):
    (x, gate, w1, b1, w2, b2), ei = dispatch_case(device, dtype)
    y = dispatch(backend, x, ei, gate, w1, b1, w2, b2)                    # (n, d)
    w = torch.linspace(-1, 1, y.numel(), device=device, dtype=torch.float64).view_as(y)
    (y.double() * w).sum().backward()
    return y, [t.grad for t in (x, gate, w1, b1, w2, b2)]


def skip_unless_backend_runs(backend, dtype):
    if backend == "grouped" and not grouped_mm_available("cuda", dtype):
        pytest.skip(f"torch {torch.__version__} has no grouped_mm on this GPU for {dtype}")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("backend", BACKENDS)
def test_dispatch_backends_agree_on_the_gpu_float32(strict_fp32, backend):
    # every backend against the float64 CPU oracle (dense).  Outputs: sums of 32 terms at
    # u = 6e-8, below 1e-5 of the output's largest entry.  Gradients: a bias gradient sums the
    # ~120 tokens of its expert with both signs, so its rounding (K·u of the terms' magnitudes)
    # can be ten times its own size relative to it: 1e-4 (CPU float32 measured: ≤ 6e-6).
    skip_unless_backend_runs(backend, torch.float32)
    y_ref, g_ref = run_dispatch("dense", "cpu", torch.float64)
    y, grads = run_dispatch(backend, "cuda", torch.float32)
    assert_close_to_scale(y, y_ref, 1e-5, f"{backend} output")
    for name, a, b in zip(("x", "gate", "w1", "b1", "w2", "b2"), grads, g_ref):
        assert_close_to_scale(a, b, 1e-4, f"{backend} grad {name}")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("backend", BACKENDS)
def test_dispatch_backends_agree_on_the_gpu_bfloat16(backend):
    # bfloat16 keeps 8 significant bits (u = 3.9e-3): the inputs' rounding alone moves an
    # output by a few u of its scale, the matmuls accumulate in float32; 3e-2 of the output's
    # largest entry leaves a margin (CPU bfloat16 measured: ≤ 6e-3).  Outputs only: a ReLU
    # whose input is within rounding of 0 may switch, which is continuous in the output but
    # not in the gradients.
    skip_unless_backend_runs(backend, torch.bfloat16)
    y_ref, _ = run_dispatch("dense", "cpu", torch.float64)
    y, _ = run_dispatch(backend, "cuda", torch.bfloat16)
    assert y.dtype == torch.bfloat16
    assert_close_to_scale(y, y_ref, 3e-2, f"{backend} bfloat16 output")


def train_twice(objective: str, amp: bool) -> dict:
    """Two seeded CUDA runs of the same configuration; whether histories and weights agree."""
    seq, tasks, v = lookup_data()
    cfg = TrainConfig(objective=objective, steps=30, batch_size=16, lr=1e-2, z_beta=1e-3,
                      log_every=1, seed=5, amp=amp, progress=False, device="cuda")
    (m1, h1), (m2, h2) = (build_and_train(small_cfg(v), train_data(seq, tasks), cfg)
                          for _ in range(2))
    same_weights = all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(),
                                                         m2.state_dict().values()))
    return {"same_history": h1.total == h2.total, "same_weights": same_weights,
            "finite": all(math.isfinite(x) for x in h1.total), "last": h1.total[-1]}


DETERMINISTIC = """
import json, sys
import torch
torch.use_deterministic_algorithms(True)
sys.path.insert(0, sys.argv[1])
import test_cuda
print(json.dumps({f"{o} amp={a}": test_cuda.train_twice(o, a)
                  for o in ("ce+lb", "ce+router") for a in (False, True)}))
"""


@pytest.mark.cuda
@needs_cuda
def test_training_on_cuda_is_deterministic_with_deterministic_algorithms():
    # A process of its own: CUBLAS_WORKSPACE_CONFIG must be set before cuBLAS starts, and
    # deterministic mode must not leak into the other tests.  An op without a deterministic
    # CUDA kernel raises there (RuntimeError naming it), which fails this test.
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    res = subprocess.run([sys.executable, "-c", DETERMINISTIC, str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = json.loads(res.stdout.strip().splitlines()[-1])
    for name, r in runs.items():
        assert r["finite"] and r["same_history"] and r["same_weights"], (name, r)


@pytest.mark.cuda
@needs_cuda
def test_bf16_autocast_training_reaches_the_float32_loss():
    # The lookup task's cross-entropy has a floor (the key after the template is uniform over
    # 12: ln 12 / 4 predicted positions ≈ 0.62); both runs must get near it and to the same
    # accuracy.  0.1 absolute on the final CE (mean of the last five logged values) is about
    # 15 % of the floor: far above bf16's rounding of the loss, far below an unconverged run.
    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    res = {}
    for amp in (False, True):
        cfg = TrainConfig(objective="ce+router", steps=250, batch_size=48, lr=1e-2,
                          warmup_steps=10, amp=amp, progress=False, device="cuda")
        model, hist = build_and_train(small_cfg(v), data, cfg)
        acc = exact_match(model, seq[:, :3], torch.full((len(seq),), 3), seq[:, 3]).accuracy
        res[amp] = (sum(hist.ce[-5:]) / 5, hist.ce[0], acc, hist.tf32)
    (ce32, first32, acc32, tf32_off), (ce16, first16, acc16, tf32_on) = res[False], res[True]
    assert tf32_off is False and tf32_on is True
    assert ce32 < 0.3 * first32 and ce16 < 0.3 * first16, res
    assert abs(ce16 - ce32) < 0.1, res
    assert acc32 > 0.95 and acc16 > 0.95, res


@pytest.mark.cuda
@needs_cuda
def test_gpu_name_reaches_the_provenance(tmp_path):
    from moe_routing.experiments.task_routing.config import ExperimentConfig
    from moe_routing.experiments.task_routing.runs import run_experiment

    name = torch.cuda.get_device_name()
    assert name and provenance("smoke", "cuda").device_name == name
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=2, objective="ce+lb", steps=8, n_relations=4,
                           n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
                           batch_size=32, warmup_steps=2, device="cuda")
    res = run_experiment(cfg, tmp_path)
    assert res["provenance"]["device"] == "cuda" and res["provenance"]["device_name"] == name
    assert res["train_config"]["device"] == "cuda" and res["train_config"]["tf32"] is True


@pytest.mark.cuda
@needs_cuda
def test_tf32_only_during_the_run_on_cuda():
    seq, tasks, v = lookup_data()
    before = torch.get_float32_matmul_precision()
    seen = []

    def look(_model):
        seen.append(torch.get_float32_matmul_precision())
        return {}

    for amp in (True, False):
        cfg = TrainConfig(steps=4, batch_size=16, amp=amp, progress=False, device="cuda")
        assert cfg.tf32 is amp
        _, hist = build_and_train(small_cfg(v), train_data(seq, tasks), cfg, eval_fn=look)
        assert hist.tf32 is amp and hist.device == "cuda"
        assert torch.get_float32_matmul_precision() == before
    assert seen == [before, before]             # evaluations at the caller's precision


@pytest.mark.cuda
@needs_cuda
def test_batch_order_on_cuda_is_the_cpu_order():
    got = list(batch_order(50, 16, 11, torch.Generator().manual_seed(2), "cuda"))
    want = list(batch_order(50, 16, 11, torch.Generator().manual_seed(2)))
    assert all(a.device.type == "cuda" and torch.equal(a.cpu(), b) for a, b in zip(got, want))


def syncs_in_train_py(steps: int) -> tuple[int, int]:
    """(host synchronisations attributed to train.py, all of them) in a CUDA run of ``steps``
    steps with two logged steps (the first and the last)."""
    import warnings

    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    cfg = TrainConfig(objective="ce+lb", steps=steps, batch_size=16, log_every=10_000,
                      progress=False, device="cuda")
    model = MoETransformer(small_cfg(v))
    train(model, data, TrainConfig(**{**cfg.as_dict(), "steps": 2}))     # warm-up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train(model, data, cfg)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    return sum(Path(w.filename).name == "train.py" for w in syncs), len(syncs)


@pytest.mark.cuda
@needs_cuda
def test_the_training_loop_itself_does_not_wait_for_the_gpu_per_step():
    # 12 and 24 steps (4 and 8 epochs of 48 sentences): the loop's own synchronisations (data
    # moved once, the two logged steps read back) must not grow with the steps or the epochs.
    # Syncs inside the model and the losses (boolean-mask indexing) are counted, not asserted.
    short, short_all = syncs_in_train_py(12)
    long, long_all = syncs_in_train_py(24)
    assert short >= 2, "the logged steps' read-back was not seen: is sync debug mode working?"
    assert long == short, (short, long, short_all, long_all)


def test_the_chapter_counts_the_paper_profiles_runs_as_the_hand_count():
    """The training chapter states how many runs the paper profile trains: its count (the
    shared groups taken in, as the pipeline reads the file) is the hand count."""
    from moe_routing._internal.chapters.training import planned_runs

    assert planned_runs(ROOT / "notebooks" / "params" / "paper.yaml") == paper_grid_runs()[0]
