"""The forward pass of a constructed model restricted to the coordinates its weights touch.

The constructed weights are block-sparse (one-hot blocks, selection matrices).  Multiplying
the zeros costs 10× more than the rest when every distinct prefix of the 50-task dataset is
checked, so verification evaluates *the same function* on the supports of the weights:
every matrix product keeps only the rows/columns where the weights are non-zero (the supports
are computed from the model's own tensors, not assumed), which changes nothing but the order
of floating-point additions.  ``tests/test_construction_core.py`` checks agreement with
:meth:`MoETransformer.forward` to float32 precision.  Only what the construction uses is
supported: no LayerNorm, no attention biases, top-1 routing, knock-out in "zero" mode.
"""

from __future__ import annotations

import math

import torch

from .._internal.validation import require


def _nz_rows(w):
    return torch.nonzero(w.abs().sum(tuple(range(1, w.dim()))) > 0).squeeze(1)


def _nz_cols(w):
    return torch.nonzero(w.abs().sum(tuple(range(w.dim() - 1))) > 0).squeeze(1)


class RestrictedForward:
    """Precomputed supports of ``model``; call with token ids (b, t)."""

    @torch.no_grad()
    def __init__(self, model):
        cfg = model.config
        require(not (cfg.layernorm or cfg.attn_bias or cfg.top_k != 1), "model.config", cfg,
                "layernorm=False, attn_bias=False, top_k=1 (the constructed models)")
        self.m = m = model
        a = m.attn
        self.h = cfg.n_heads
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.heads = []
        for h in range(cfg.n_heads):
            qc = _nz_cols(a.w_q[h]) if a.w_q[h].any() else torch.zeros(0, dtype=torch.long)
            kc = _nz_cols(a.w_k[h]) if a.w_k[h].any() else torch.zeros(0, dtype=torch.long)
            qk = torch.unique(torch.cat([qc, kc]))
            vr, vc = _nz_rows(a.w_v[h]), _nz_cols(a.w_v[h])
            oc = _nz_cols(a.w_o[h][vc])
            self.heads.append(dict(qk=qk, wq=a.w_q[h][:, qk], wk=a.w_k[h][:, qk],
                                   vr=vr, wv=a.w_v[h][vr][:, vc], vc=vc,
                                   wo=a.w_o[h][vc][:, oc], oc=oc))
        w1 = m.experts.weights()[0]                                 # (e, d, f) masked
        rin = torch.unique(torch.cat([_nz_cols(m.router.weight * m.router.input_mask),
                                      _nz_rows(w1.permute(1, 0, 2))]))
        self.rin = rin
        e_w1, e_b1, e_w2, e_b2 = m.experts.weights()
        self.cout = _nz_cols(m.unembed.weight)
        require(m.unembed.bias is None, "model.config.unembed_bias", True,
                "False (the restricted forward has no unembedding bias)")
        self.w1 = e_w1[:, rin]                                      # (e, |rin|, f)
        self.b1 = e_b1
        self.w2 = e_w2[:, :, self.cout]                             # (e, f, |cout|)
        self.b2 = e_b2[:, self.cout]
        # per expert: the hidden units it uses, the inputs they read and the outputs they
        # write (experts are padded to the largest one and each reads a few blocks only)
        self.expert_support = []
        for e in range(cfg.n_experts):
            w1e, b1e, w2e, b2e = self.w1[e], self.b1[e], self.w2[e], self.b2[e]
            units = torch.nonzero(((w1e != 0).any(0) | (b1e != 0)) & (w2e != 0).any(1)).squeeze(1)
            ins = torch.nonzero((w1e[:, units] != 0).any(1)).squeeze(1)
            outs = torch.nonzero((w2e[units] != 0).any(0) | (b2e != 0)).squeeze(1)
            self.expert_support.append(dict(
                units=units, ins=ins, outs=outs, w1=w1e[ins][:, units].contiguous(), b1=b1e[units],
                w2=w2e[units][:, outs].contiguous(), b2=b2e[outs]))
        self.wr = (m.router.weight * m.router.input_mask)[:, rin]
        self.br = m.router.bias
        self.tau = m.router.temperature
        te, pe = m.tok_emb.weight.detach(), m.pos_emb.weight.detach()
        # per-token and per-position tables of every linear map of the embedding (exact:
        # (tok_emb + pos_emb) W = tok_emb W + pos_emb W)
        self.t_in, self.p_in = te[:, rin], pe[:, rin]
        self.t_out, self.p_out = te[:, self.cout], pe[:, self.cout]
        for H in self.heads:
            H["tq"], H["pq"] = te @ H["wq"], pe @ H["wq"]
            H["tk"], H["pk"] = te @ H["wk"], pe @ H["wk"]
            H["tv"], H["pv"] = te[:, H["vr"]] @ H["wv"], pe[:, H["vr"]] @ H["wv"]
            rin_pos = {int(c): i for i, c in enumerate(rin)}
            cout_pos = {int(c): i for i, c in enumerate(self.cout)}
            H["ir"] = torch.tensor([rin_pos[int(c)] for c in H["oc"] if int(c) in rin_pos], dtype=torch.long)
            H["jr"] = torch.tensor([i for i, c in enumerate(H["oc"]) if int(c) in rin_pos], dtype=torch.long)
            H["io"] = torch.tensor([cout_pos[int(c)] for c in H["oc"] if int(c) in cout_pos],
                                   dtype=torch.long)
            H["jo"] = torch.tensor([i for i, c in enumerate(H["oc"]) if int(c) in cout_pos], dtype=torch.long)

    @torch.no_grad()
    def residual(self, idx: torch.Tensor, select: torch.Tensor | None = None) -> dict:
        """Embeddings and attention: idx (b, t) → dict(flat (n, |rin|) what the router and the
        experts read, out (n, |cout|) the residual on the unembedding's support before the
        experts, heads: list of (b, t, |oc_h|) head outputs, att), at the ``select``-ed
        positions (all b·t positions, row-major, without ``select``)."""
        b, t = idx.shape
        pos = torch.arange(t)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        heads, atts = [], []
        for H in self.heads:
            q = H["tq"][idx] + H["pq"][pos]                         # (b, t, |qk|)
            k = H["tk"][idx] + H["pk"][pos]
            s = (q @ k.transpose(-1, -2)) * self.scale
            att = s.masked_fill(~causal, float("-inf")).softmax(-1)  # (b, t, t)
            v = H["tv"][idx] + H["pv"][pos]
            y = (att @ v) @ H["wo"]                                 # (b, t, |oc|)
            heads.append(y)
            atts.append(att)
        if select is None:
            select = torch.ones(b, t, dtype=torch.bool)
        tok_s = idx[select]                                          # (n,)
        pos_s = pos.expand(b, t)[select]
        flat = self.t_in[tok_s] + self.p_in[pos_s]                   # (n, |rin|)
        out = self.t_out[tok_s] + self.p_out[pos_s]                  # (n, |cout|)
        for H, y in zip(self.heads, heads):
            if len(H["ir"]) or len(H["io"]):
                ys = y[select]                                       # (n, |oc|)
                if len(H["ir"]):
                    flat[:, H["ir"]] += ys[:, H["jr"]]
                if len(H["io"]):
                    out[:, H["io"]] += ys[:, H["jo"]]
        return dict(flat=flat, out=out, heads=heads, att=atts)

    @torch.no_grad()
    def experts(self, flat: torch.Tensor, out: torch.Tensor):
        """Router and top-1 experts on rows: flat (n, |rin|), out (n, |cout|) → (out + the
        chosen expert's output (n, |cout|), expert (n,), probs (n, E))."""
        m = self.m
        logits_r = (flat @ self.wr.T + (self.br if self.br is not None else 0.0)) / self.tau
        probs = logits_r.softmax(-1)                                 # (n, E)
        top_p, top_i = probs.max(-1)                                 # (n,)
        gate = top_p if m.config.gate == "switch" else torch.ones_like(top_p)
        require(m.knockout_mode == "zero", "model.knockout_mode", m.knockout_mode,
                "'zero' (the only knock-out the restricted forward supports)")
        gate = gate * m.expert_alive[top_i]
        out = out.clone()
        for e in torch.unique(top_i).tolist():
            sel = torch.nonzero(top_i == e).squeeze(1)
            S = self.expert_support[e]
            if not len(S["outs"]):
                continue
            hdn = torch.relu(flat[sel][:, S["ins"]] @ S["w1"] + S["b1"])
            y = (hdn @ S["w2"] + S["b2"]) * gate[sel, None]
            out[sel[:, None], S["outs"][None, :]] += y
        return out, top_i, probs

    @torch.no_grad()
    def __call__(self, idx: torch.Tensor, select: torch.Tensor | None = None):
        """idx (b, t) → dict(out (b, t, |cout|) residual A'' on the unembedding's support,
        expert (b, t), probs (b, t, E), heads: list of (b, t, |oc_h|) head outputs on their
        support, att).

        ``select`` (b, t) bool: evaluate the router and the experts only at these positions;
        ``out``, ``expert`` and ``probs`` are then (n_selected, …) in row-major order (the
        heads stay (b, t, …): attention needs every position anyway)."""
        b, t = idx.shape
        r = self.residual(idx, select)
        out, top_i, probs = self.experts(r["flat"], r["out"])
        if select is None:
            out, top_i, probs = out.view(b, t, -1), top_i.view(b, t), probs.view(b, t, -1)
        return dict(out=out, expert=top_i, heads=r["heads"], att=r["att"], probs=probs)

    def logits(self, out_rows: torch.Tensor) -> torch.Tensor:
        """(r, |cout|) → (r, V): the unembedding on its support."""
        return out_rows @ self.m.unembed.weight[:, self.cout].T
