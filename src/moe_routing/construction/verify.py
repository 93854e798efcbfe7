"""Exhaustive verification of a constructed model on every distinct prefix of a dataset.

Every prefix w of every sentence is a node of the dataset's prefix trie; the model is causal,
so the prediction for w is the model's output at the last position of *any* sentence through
w.  We run the model (its own ``forward``) on whole sentences and keep, for each trie node,
its first occurrence: every distinct prefix exactly once.

Measured (all in log space, so ε = 1e-8 is resolved in float32):

* invalid mass ``P(x ∉ V(w) | w) = exp(logsumexp_{x∉V} ℓ_x − logsumexp_x ℓ_x)``; the valid mass
  is 1 minus it.  Float32 logits of size ≤ β carry an absolute error ≲ β·2⁻²⁴·(few), so the
  *relative* error of the invalid mass is ≲ 1e-5: tiny invalid masses are resolved, while
  ``1 − invalid`` itself would round to 1.
* routing: the expert chosen at each prefix against the routing label of its structural node;
* disentanglement: head 1's output against the first sentence with the same (template,
  position) -- any subject; head 2's output after the subject against the first occurrence of
  the same subject -- any template;
* logits are computed from the output block only (``W_U`` is checked to vanish elsewhere),
  which is the model's own unembedding restricted to the columns it reads.

Circuit isolation (``isolation``): knocking out expert k ("zero" mode of
:meth:`MoETransformer.knock_out`: the tokens routed to k keep only their residual stream).  At
task k's object slots the output block is then exactly zero, every logit is 0 and the model is
*uniform* over the vocabulary: "chance" means exactly this, P(correct object) = 1/V, and
greedy accuracy is that of a uniform guess, 1/V in expectation (the argmax of a constant row is
a tie; we report P(object) rather than an arbitrary tie-break).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from .._internal.validation import integer, probability, require

from .build import beta_for


@dataclass
class Verification:
    n_prefixes: int
    max_invalid: float              # max over prefixes of P(invalid)
    min_valid: float                # 1 − max_invalid (float64)
    argmin_prefix: str              # the worst prefix, as text
    invalid: np.ndarray             # (P,) per-prefix invalid mass
    routed_ok: float                # share of task-determined prefixes routed to their task
    n_task_determined: int
    junction_ok: float              # share of shared prefixes sent to the junction expert
    route_matrix: np.ndarray        # (K+1, E) counts: routing label x chosen expert
    head1_dev: float                # max |Δ head-1 output| across subjects, same (template, pos)
    head2_dev: float                # max |Δ head-2 output| across templates, same subject
    head2_dev_before_object: float  # the same restricted to prefixes before the object
    seconds: float
    max_invalid_by_eps: dict        # ε -> max invalid mass of the same model with W_U rescaled to β(ε)
    certificate: object = None      # dense models: certify.CertificateStats of the evaluation


def struct_of_trie(dataset, nodes) -> np.ndarray:
    """(n_trie_nodes,) structural node of each trie node."""
    out = np.full(dataset.trie.n_nodes, -1, dtype=np.int64)
    pn = dataset.prefix_node
    node_at = nodes.node_at
    for g in range(len(node_at)):
        rows = np.nonzero(dataset.template == g)[0]
        cols = np.arange(len(node_at[g]))
        out[pn[np.ix_(rows, cols)].ravel()] = np.tile(np.array(node_at[g]), len(rows))
    return out


class _Unembed:
    """Logits from the output block, exploiting that word tokens read only OUT_SYN and entity
    tokens only OUT_KEY/OUT_VAL (checked on the weights, so the result is exact): entity
    logits are computed only for rows whose key/value coordinates are not all zero (elsewhere
    they are exactly 0).  V(w) is used in its sparse form (the trie's CSR lists): a dense
    (rows × V) boolean mask per batch cost more than the logits themselves."""

    def __init__(self, model, report, fast, dataset):
        lay = report.layout
        W = model.unembed.weight.detach()
        V = W.shape[0]
        self.ns = ns = lay.n_out_syn
        osyn, okey, oval = lay.block("OUT_SYN"), lay.block("OUT_KEY"), lay.block("OUT_VAL")
        mask_syn = torch.zeros(W.shape[1], dtype=torch.bool)
        mask_syn[osyn] = True
        mask_ent = torch.zeros(W.shape[1], dtype=torch.bool)
        mask_ent[okey] = True
        mask_ent[oval] = True
        require(model.unembed.bias is None and not bool(W[:ns][:, ~mask_syn].any())
                and not bool(W[ns:][:, ~mask_ent].any()), "model.unembed", model.unembed,
                "the construction's block structure (word tokens read OUT_SYN only, entities "
                "OUT_KEY/OUT_VAL only, no bias): the restricted evaluation would not be exact")
        cout = fast.cout
        self.pos_syn = torch.nonzero(mask_syn[cout]).squeeze(1)     # positions within cout
        self.pos_ent = torch.nonzero(mask_ent[cout]).squeeze(1)
        self.W_syn = W[:ns][:, cout[self.pos_syn]].T.contiguous()   # (|syn cols|, ns)
        self.W_ent = W[ns:][:, cout[self.pos_ent]].T.contiguous()   # (|ent cols|, V − ns)
        self.V = V
        trie = dataset.trie
        self.indptr = torch.from_numpy(trie.next_indptr)
        self.ids = torch.from_numpy(trie.next_ids)
        owner = np.repeat(np.arange(trie.n_nodes), np.diff(trie.next_indptr))
        self.n_valid_ent = torch.from_numpy(
            np.bincount(owner[trie.next_ids >= ns], minlength=trie.n_nodes))

    def logits(self, out_rows):
        """(r, |cout|) → (word logits (r, ns), entity logits (r_nz, V − ns) of the rows ``nz``
        (r,) bool whose entity logits are not all exactly zero)."""
        syn = out_rows[:, self.pos_syn] @ self.W_syn
        e = out_rows[:, self.pos_ent]
        nz = (e != 0).any(1)
        return syn, e[nz] @ self.W_ent, nz

    def valid_entries(self, nodes):
        """Sparse V(w) of a batch of nodes (r,): (row (n,), token id (n,))."""
        start, stop = self.indptr[nodes], self.indptr[nodes + 1]
        cnt = stop - start
        row = torch.repeat_interleave(torch.arange(len(nodes)), cnt)
        offs = torch.arange(int(cnt.sum())) - torch.repeat_interleave(torch.cumsum(cnt, 0) - cnt, cnt)
        return row, self.ids[torch.repeat_interleave(start, cnt) + offs]

    def invalid_mass(self, syn, ent, nz, nodes, entries, scale: float = 1.0):
        """P(x ∉ V(w) | w) per row, in log space, for the logits multiplied by ``scale``.

        Rows with entity logits: ``logsumexp`` over the invalid tokens (valid ones set to −∞)
        against ``logaddexp`` of it and the valid tokens' ``logsumexp`` -- one pass over V.
        Rows whose entity logits are all exactly 0: the entities are summed in closed form
        (log of the count of invalid ones), so only the word logits are exponentiated."""
        ns = self.ns
        row, col = entries
        r = len(nodes)
        out = torch.empty(r, dtype=torch.float64)
        is_syn = col < ns
        if nz.any():
            where = torch.full((r,), -1, dtype=torch.long)
            idx = torch.nonzero(nz).squeeze(1)
            where[idx] = torch.arange(len(idx))
            full = torch.cat([syn[idx], ent], 1) * scale                # (r_nz, V)
            take = nz[row]
            vr, vc = where[row[take]], col[take]
            lv = full[vr, vc]                                          # valid logits
            full[vr, vc] = float("-inf")
            lse_inv = torch.logsumexp(full, -1).double()
            mx = torch.full((len(idx),), float("-inf")).scatter_reduce(0, vr, lv, "amax")
            sm = torch.zeros(len(idx), dtype=torch.float64).index_add_(
                0, vr, (lv - mx[vr]).double().exp())
            lse_val = mx.double() + sm.log()
            out[idx] = (lse_inv - torch.logaddexp(lse_inv, lse_val)).exp()
        z = ~nz
        if z.any():
            idx = torch.nonzero(z).squeeze(1)
            lg = syn[idx].double() * scale                             # (r_z, ns)
            where = torch.full((r,), -1, dtype=torch.long)
            where[idx] = torch.arange(len(idx))
            take = z[row] & is_syn
            masked = lg.clone()
            masked[where[row[take]], col[take]] = float("-inf")
            n_ent = self.V - ns
            n_inv_ent = (n_ent - self.n_valid_ent[nodes[idx]]).double()
            lse_all = torch.logaddexp(torch.logsumexp(lg, -1),
                                      torch.full((len(idx),), math.log(n_ent), dtype=torch.float64))
            lse_inv = torch.logaddexp(torch.logsumexp(masked, -1), torch.log(n_inv_ent))
            out[idx] = (lse_inv - lse_all).exp()
        return out


def _flush_denormals(fn):
    """Run ``fn`` with float denormals flushed to zero (x86): the exponentials of the invalid
    logits, e^{−β·…}, fall below 1e-38 in float32 and subnormal arithmetic is ~10× slower.
    Flushing changes terms smaller than 1e-38 relative to the largest one -- nothing the
    measured masses (≥ 1e-12) can see.  The flag is switched off again afterwards."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        torch.set_flush_denormal(True)
        try:
            return fn(*a, **kw)
        finally:
            torch.set_flush_denormal(False)
    return wrapper


@_flush_denormals
@torch.no_grad()
def verify(model, report, dataset, batch_size: int = 256, eps_list=(),
           certify: bool = True) -> Verification:
    """Check every distinct prefix (see module docstring).

    ``eps_list``: also measure, in the same pass, the model whose W_U is rescaled to
    β(ε) for each ε (the only constant of the construction that depends on ε), i.e. logits
    multiplied by β(ε)/β.

    ``certify`` (dense models): evaluate the FFN through :class:`.certify.SilenceCertificate`
    (only the neurons not proven silent); ``False`` evaluates every neuron at every prefix."""
    batch_size = integer("batch_size", batch_size, low=1)
    eps_list = [probability(f"eps_list[{i}]", e) for i, e in enumerate(eps_list)]
    t0 = time.perf_counter()
    from .fastpath import RestrictedForward

    model.eval()
    fast = RestrictedForward(model)
    unembed = _Unembed(model, report, fast, dataset)
    nodes = report.nodes
    K = dataset.n_tasks
    E = model.config.n_experts
    s_of_t = struct_of_trie(dataset, nodes)
    pn = dataset.prefix_node                                  # (M, n)
    M, n = pn.shape
    first_pos = first_occurrences(dataset)
    is_first = np.zeros(M * n, dtype=bool)
    is_first[first_pos] = True
    is_first = is_first.reshape(M, n)
    seqs = torch.as_tensor(dataset.seqs)
    inv_all = np.zeros(dataset.trie.n_nodes)
    ratios = {e: beta_for(report, e, dataset.vocab_size) / report.beta for e in eps_list}
    inv_eps = {e: 0.0 for e in ratios}
    route = np.zeros((K + 1, E), dtype=np.int64)
    ref1_arr = torch.full((len(nodes.node_at), n, len(fast.heads[0]["oc"])), float("nan"))
    ref2 = torch.full((dataset.tokenizer.n_entity, len(fast.heads[1]["oc"])), float("nan"))
    d1 = d2 = d2b = 0.0
    e0 = int(dataset.tokenizer.entity_ids[0]) if dataset.tokenizer.n_entity else 0
    cert = None
    if report.kind == "dense" and certify:
        cert = dense_certificate(fast, report, dataset, s_of_t, first_pos)
        order = np.lexsort((dataset.lengths, dataset.task))   # batches of one task: few candidates
    else:
        order = np.argsort(dataset.lengths, kind="stable")
    for s in range(0, M, batch_size):
        rows = order[s:s + batch_size]
        T = int(dataset.lengths[rows].max()) - 1
        x = seqs[rows, :T]
        sel = torch.as_tensor(is_first[rows, :T])
        nd = torch.as_tensor(pn[rows, :T])[sel]                # trie nodes
        if cert is None:
            out = fast(x, select=sel)                          # only first occurrences
        else:
            r = fast.residual(x, select=sel)
            o = r["out"]
            o[:, cert.outs] += cert.ffn(r["flat"], torch.as_tensor(s_of_t[nd.numpy()]))
            out = dict(out=o, expert=torch.zeros(len(o), dtype=torch.long), heads=r["heads"])
        syn, ent, nz = unembed.logits(out["out"])
        entries = unembed.valid_entries(nd)
        inv_all[nd.numpy()] = unembed.invalid_mass(syn, ent, nz, nd, entries).numpy()
        for e, r in ratios.items():
            inv_e = (inv_all[nd.numpy()] if r == 1.0     # the model as built: measured above
                     else unembed.invalid_mass(syn, ent, nz, nd, entries, r).numpy())
            inv_eps[e] = max(inv_eps[e], float(inv_e.max()) if len(inv_e) else 0.0)
        lab = nodes.label[s_of_t[nd.numpy()]]
        ex = out["expert"].numpy()
        np.add.at(route, (lab, ex), 1)
        # disentanglement
        h1 = out["heads"][0]                                   # (b, T, support of head 1)
        h2 = out["heads"][1]
        g = torch.as_tensor(dataset.template[rows])
        ref = ref1_arr[g, :T]
        fresh = torch.isnan(ref[..., 0])
        ref[fresh] = h1[fresh]
        ref1_arr[g, :T] = ref
        d1 = max(d1, float((h1 - ref).abs().max()))
        sp = torch.as_tensor(dataset.subject_pos[rows])
        op = torch.as_tensor(dataset.object_pos[rows])
        subj = seqs[rows, sp] - e0
        pos = torch.arange(T)[None, :]
        after = (pos >= sp[:, None]) & (pos <= torch.as_tensor(dataset.lengths[rows])[:, None] - 2)
        before_obj = after & (pos < op[:, None])
        r2 = ref2[subj]
        new = torch.isnan(r2[:, 0])
        r2[new] = h2[new, sp[new]]
        ref2[subj] = r2
        dev = (h2 - r2[:, None, :]).abs().amax(-1)             # (b, T)
        d2 = max(d2, float(dev[after].max()) if after.any() else 0.0)
        d2b = max(d2b, float(dev[before_obj].max()) if before_obj.any() else 0.0)
    worst = int(np.argmax(inv_all))
    tok = dataset.tokenizer
    det = route[:K]
    routed_ok = (float(np.trace(det[:, :K]) / det.sum()) if det.sum() and E == K + 1
                 else float("nan"))
    junc_ok = float(route[K, E - 1] / route[K].sum()) if route[K].sum() and E == K + 1 else float("nan")
    mx = float(inv_all.max())
    return Verification(
        n_prefixes=int(dataset.trie.n_nodes), max_invalid=mx, min_valid=1.0 - mx,
        argmin_prefix=tok.decode(dataset.trie.prefix(worst)) or "(empty prefix)",
        invalid=inv_all, routed_ok=routed_ok, n_task_determined=int(det.sum()),
        junction_ok=junc_ok, route_matrix=route, head1_dev=d1, head2_dev=d2,
        head2_dev_before_object=d2b, seconds=time.perf_counter() - t0,
        max_invalid_by_eps=inv_eps, certificate=cert.stats if cert is not None else None)


def first_occurrences(dataset) -> np.ndarray:
    """(n_trie_nodes,) flat index into ``dataset.prefix_node`` of each prefix's first occurrence
    (trie node order): evaluating there checks every distinct prefix exactly once."""
    flat = dataset.prefix_node.ravel()
    ok = np.nonzero(flat >= 0)[0]
    _, first = np.unique(flat[ok], return_index=True)
    return ok[first]


def dense_certificate(fast, report, dataset, s_of_t=None, first_pos=None):
    """The :class:`.certify.SilenceCertificate` of a dense model, from the residual rows
    observed at the first prefix of each structural node (``s_of_t``, ``first_pos``: as
    computed by :func:`struct_of_trie` and :func:`first_occurrences`, when already at hand)."""
    from .certify import SilenceCertificate

    s_of_t = struct_of_trie(dataset, report.nodes) if s_of_t is None else s_of_t
    first_pos = first_occurrences(dataset) if first_pos is None else first_pos
    n = dataset.prefix_node.shape[1]
    n_struct = report.nodes.n_nodes
    trie_nodes = dataset.prefix_node.ravel()[first_pos]       # trie node of each first occurrence
    struct = s_of_t[trie_nodes]
    _, pick = np.unique(struct, return_index=True)             # first occurrence of each struct node
    require(len(pick) == n_struct, "dataset", dataset,
            f"a dataset with a prefix at each of the report's {n_struct} structural nodes "
            f"({n_struct - len(pick)} have none)")
    flat_idx = first_pos[pick]
    rows, cols = flat_idx // n, flat_idx % n
    seqs = torch.as_tensor(dataset.seqs)
    rep = torch.empty(n_struct, len(fast.rin))
    for s in range(0, n_struct, 512):
        r, c = rows[s:s + 512], cols[s:s + 512]
        T = int(c.max()) + 1
        sel = torch.zeros(len(r), T, dtype=torch.bool)
        sel[torch.arange(len(r)), torch.as_tensor(c)] = True
        rep[s:s + len(r)] = fast.residual(seqs[r, :T], select=sel)["flat"]
    return SilenceCertificate(fast, report, rep, report.nodes.label)


@_flush_denormals
@torch.no_grad()
def object_predictions(model, report, dataset, split: str = "test", batch_size: int = 512,
                       fast=None, rows=None, unembed=None):
    """At the object slot of every sentence of ``split``: (argmax == object (m,) bool,
    P(object) (m,), logits row max−min (m,), task (m,), expert chosen there (m,)).

    ``fast``: the model's :class:`.fastpath.RestrictedForward` when already built (knock-outs
    are read at call time); ``unembed``: the matching ``_Unembed``; ``rows``: evaluate only
    these positions of the split (ints into ``dataset.split_indices(split)``; the outputs are
    then of length ``len(rows)``)."""
    from .fastpath import RestrictedForward

    fast = fast if fast is not None else RestrictedForward(model)
    unembed = unembed if unembed is not None else _Unembed(model, report, fast, dataset)
    idx = dataset.split_indices(split)
    if rows is not None:
        idx = idx[np.asarray(rows, dtype=np.int64)]
    seqs = torch.as_tensor(dataset.seqs[idx])
    op = torch.as_tensor(dataset.object_pos[idx])
    order = np.argsort(dataset.object_pos[idx], kind="stable")
    res = np.zeros((len(idx), 4))
    for s in range(0, len(idx), batch_size):
        r = torch.as_tensor(order[s:s + batch_size])
        T = int(op[r].max())
        x = seqs[r, :T]
        pos = op[r] - 1
        sel = torch.zeros(x.shape, dtype=torch.bool)
        sel[torch.arange(len(r)), pos] = True                  # one position per row
        fw = fast(x, select=sel)
        o = fw["out"]                                          # (m, |cout|)
        syn, ent, nz = unembed.logits(o)
        lg = torch.zeros(len(o), unembed.V, dtype=torch.float64)
        lg[:, :unembed.ns] = syn.double()
        lg[nz, unembed.ns:] = ent.double()
        tgt = seqs[r, op[r]]
        lp = torch.log_softmax(lg, -1)
        res[r.numpy(), 0] = (lg.argmax(-1) == tgt).double().numpy()
        res[r.numpy(), 1] = lp[torch.arange(len(r)), tgt].exp().numpy()
        res[r.numpy(), 2] = (lg.max(-1).values - lg.min(-1).values).numpy()
        res[r.numpy(), 3] = fw["expert"].double().numpy()
    return (res[:, 0].astype(bool), res[:, 1], res[:, 2], dataset.task[idx],
            res[:, 3].astype(np.int64))


#: how :func:`isolation` evaluates a knocked-out model
ISOLATION_METHODS = ("rows", "full")


@torch.no_grad()
def isolation(model, report, dataset, experts_to_test, split: str = "test",
              method: str = "rows") -> list[dict]:
    """Knock out expert k (zero mode) for each k in ``experts_to_test``; per k: task k's
    accuracy and mean P(object) against chance 1/V, the largest change of any other task's
    accuracy, and the largest change of P(object) on other tasks.

    ``method="full"`` re-evaluates every object slot of the split for each k (the reference);
    ``"rows"`` (default) re-evaluates only the slots routed to expert k and reuses the others'
    unknocked predictions.  The two agree exactly on what they measure: in a one-layer top-1
    model, zero mode multiplies expert k's gate by 0 and leaves the router alone, so a slot
    whose chosen expert is not k computes the same numbers with and without the knock-out
    (``tests/test_construction_core.py`` holds the two methods equal).  A slot of *another*
    task that is routed to k is re-evaluated, so a knock-out that leaks into other tasks still
    shows; and the cost falls from one pass per knocked-out expert to about one pass in all.
    """
    from .._internal.validation import choice

    from .fastpath import RestrictedForward

    choice("method", method, ISOLATION_METHODS)
    require(model.config.n_layers == 1, "model.config.n_layers", model.config.n_layers,
            "1 (a knock-out in a deeper model changes the next layer's input everywhere)")
    V = dataset.vocab_size
    fast = RestrictedForward(model)
    unembed = _Unembed(model, report, fast, dataset)
    base_ok, base_p, base_spread, task, expert = object_predictions(model, report, dataset, split,
                                                          fast=fast, unembed=unembed)
    out = []
    for k in experts_to_test:
        with model.knocked_out([int(k)]):
            if method == "full":
                ok, p, spread, _, _ = object_predictions(model, report, dataset, split,
                                                         fast=fast, unembed=unembed)
            else:
                hit = np.flatnonzero(expert == int(k))
                ok, p, spread = base_ok.copy(), base_p.copy(), base_spread.copy()
                if len(hit):
                    ok[hit], p[hit], spread[hit], _, _ = object_predictions(
                        model, report, dataset, split, fast=fast, unembed=unembed, rows=hit)
        own = task == k
        others = ~own
        acc_other_base = np.array([base_ok[task == j].mean() for j in range(dataset.n_tasks) if j != k])
        acc_other = np.array([ok[task == j].mean() for j in range(dataset.n_tasks) if j != k])
        out.append(dict(expert=int(k), task=dataset.tasks[int(k)].name,
                        acc_before=float(base_ok[own].mean()), acc_after=float(ok[own].mean()),
                        p_object_after=float(p[own].mean()), chance=1.0 / V,
                        logit_spread_after=float(spread[own].max()),
                        other_acc_change=float(np.abs(acc_other - acc_other_base).max())
                        if len(acc_other) else 0.0,
                        other_p_change=float(np.abs(p[others] - base_p[others]).max())
                        if others.any() else 0.0))
    return out
