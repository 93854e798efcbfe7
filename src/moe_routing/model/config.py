"""`MoEConfig`: the one dataclass that fixes an MoE transformer (paper A: one layer).

The same configuration serves the trained models of the experiments (paper A) and the
hand-built model of Theorems 4.1/4.2 (``moe_routing.construction``), so that both run through one
forward pass and one evaluation path.  The construction needs a few knobs a training run does
not (per-head widths, an attention output map set by hand, a router that reads only one block
of the residual stream, experts of unequal size); they are all plain fields here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .._internal.validation import choice, fail, flag, integer, positive, require

GATE_MODES = ("switch", "renormalised")
BACKENDS = ("sorted", "grouped", "loop", "dense")
ACTIVATIONS = ("relu", "gelu")


@dataclass(frozen=True)
class MoEConfig:
    """Shape and behaviour of an MoE transformer of ``n_layers`` layers (paper A: one).

    The layer is ``A' = MHA(A) + A``, ``A'' = MoE(A') + A'``, ``logits = W_U A''`` (paper A),
    with optional pre-LayerNorms (``layernorm=True``: ``MHA(LN(A))``, ``MoE(LN(A'))``,
    ``W_U LN(A'')``; off in the construction, on by default for training because it makes the
    learning rate far less touchy).  With ``n_layers = L > 1`` the layer is repeated (ours,
    beyond paper A: two-hop knowledge wants one routing decision per hop)::

        A_1 = tok_emb + pos_emb,  A_l' = MHA_l(LN(A_l)) + A_l,  A_{l+1} = MoE_l(LN(A_l')) + A_l',
        logits = W_U LN(A_{L+1})

    every layer with its own attention, router and experts of the same shape (all the fields
    below apply to each layer alike: widths, ``expert_sizes``, ``router_block``, ``gate``, …).

    Fields::

        vocab_size, max_len : vocabulary size V and longest sequence T_max (position embeddings).
        d_model : width of the residual stream.
        n_heads, d_head : attention heads and per-head width.  ``d_head`` defaults to
            ``d_model // n_heads`` but may be anything: the output projection ``attn.w_o`` maps the
            ``n_heads * d_head`` concatenated head outputs back to ``d_model`` and can be set to an
            identity or a selection matrix by hand (the construction's ``W_O = I``).
        attn_bias : biases on the q/k/v/o projections.
        n_experts : number of experts E (1 with ``d_expert`` = all neurons gives the dense FFN of
            Theorem 4.1: the router over one expert always outputs probability 1).
        d_expert : hidden width of the stored expert weights (common, padded width).
        expert_sizes : optional per-expert number of live neurons (each ≤ ``d_expert``).  Expert e
            uses neurons ``0 .. expert_sizes[e]-1``; the others are masked out of the weights in every
            forward pass, so they contribute exactly zero and receive zero gradient.  This is how
            experts of unequal size (the construction's ``L·|T(k)| + N`` bound) are represented.
        top_k : experts per token (1 in paper A).
        router_temperature : τ > 0; router probabilities are ``softmax(W_r x / τ)``.
        router_bias : a bias on the router logits.
        router_block : optional ``(start, stop)``: the router reads only residual coordinates
            ``start:stop`` (its weight columns outside the block are held at zero by a fixed mask,
            also during training).  The construction's router reads only the syntactic block.
        gate : ``"switch"`` — the output of each chosen expert is scaled by its *raw* router
            probability (Switch Transformer), so cross-entropy reaches the router even with top-1;
            ``"renormalised"`` — the chosen probabilities are renormalised to sum to one (Mixtral);
            with top-1 this gate is identically 1 and the router gets no gradient from CE.
        activation : expert nonlinearity (``"relu"`` in the paper).
        layernorm : pre-LayerNorms as described above.
        unembed_bias : a bias on ``W_U``.
        backend : how tokens are dispatched to experts: ``"sorted"`` (default: sort by expert, one
            matmul per contiguous segment, or torch's grouped matmul on CUDA), ``"grouped"`` (sorted
            with ``torch.nn.functional.grouped_mm`` always; float32/bfloat16 only), ``"loop"`` (the
            readable per-expert reference, Mixtral-style), ``"dense"`` (every expert on every token,
            then masked: a test oracle).
        init_std : standard deviation of the normal initialisation of weight matrices.
        n_layers : number of (attention, MoE) layers L ≥ 1 (default 1, the model of paper A; a
            one-layer model is exactly the model this class described before it had the field).
        entity_codes, code_start : optional fixed entity codes (ours, beyond paper A): the tokens
            ``code_start .. vocab_size-1`` (the entities of a knowledge vocabulary) are embedded by
            fixed random vectors spanning a subspace of dimension ``entity_codes`` (1 ≤ k ≤
            d_model), not by learned rows; ``tok_emb`` then holds the ``code_start`` learned rows
            and the codes are the buffer ``entity_codes``.  Why: a learned embedding row is a
            private memory of its entity, so a one-layer model stores its facts there and its
            experts are never needed; with fixed codes of rank k, everything before the experts
            is (up to LayerNorm and the attention weights) linear in a k-dimensional code, whose
            linear read-out can separate only about 2k subjects per relation (Cover's count) --
            the rest of the dictionary must sit in the experts' neurons, as in the construction,
            whose embeddings are fixed codes too.  The unembedding stays learned.
        router_loss_detached : the router logits the auxiliary losses read
            (``LayerOutput.router_logits``) are computed from the router's input *detached*,
            so the task-router loss trains the router's weights but sends no gradient into
            the shared layers (attention, embeddings, LayerNorm) -- a control of the training
            chapter (ours): does the loss hurt accuracy through the shared layers?  Routing,
            gates and every forward value are unchanged.
    """

    vocab_size: int
    max_len: int
    d_model: int = 256
    n_heads: int = 4
    d_head: int | None = None
    attn_bias: bool = False
    n_experts: int = 8
    d_expert: int = 256
    expert_sizes: tuple[int, ...] | None = None
    top_k: int = 1
    router_temperature: float = 1.0
    router_bias: bool = False
    router_block: tuple[int, int] | None = None
    gate: str = "switch"
    activation: str = "relu"
    layernorm: bool = True
    unembed_bias: bool = False
    backend: str = "sorted"
    init_std: float = 0.02
    n_layers: int = 1
    entity_codes: int | None = None
    code_start: int | None = None
    router_loss_detached: bool = False

    def __post_init__(self) -> None:
        # NumPy / torch scalars are accepted (a dataset's sizes often are) and stored as plain
        # Python values, so that a config built from them is equal to one built from ints.
        def put(name, value):
            object.__setattr__(self, name, value)

        def int_field(name, low, high=None):
            put(name, integer(f"MoEConfig.{name}", getattr(self, name), low=low, high=high))

        int_field("vocab_size", 2)
        for name in ("max_len", "d_model", "n_heads", "n_experts", "d_expert", "n_layers"):
            int_field(name, 1)
        if self.d_head is None:
            require(self.d_model % self.n_heads == 0, "MoEConfig.d_head", self.d_head,
                    f"an explicit integer ≥ 1 when n_heads={self.n_heads} does not divide "
                    f"d_model={self.d_model}")
        else:
            int_field("d_head", 1)
        int_field("top_k", 1)
        require(1 <= self.top_k <= self.n_experts, "MoEConfig.top_k", self.top_k,
                f"an integer in [1, n_experts={self.n_experts}]")
        put("router_temperature", positive("MoEConfig.router_temperature",
                                           self.router_temperature))
        put("init_std", positive("MoEConfig.init_std", self.init_std))
        for name in ("attn_bias", "router_bias", "layernorm", "unembed_bias",
                     "router_loss_detached"):
            put(name, flag(f"MoEConfig.{name}", getattr(self, name)))
        choice("MoEConfig.gate", self.gate, GATE_MODES)
        choice("MoEConfig.activation", self.activation, ACTIVATIONS)
        choice("MoEConfig.backend", self.backend, BACKENDS)
        if self.expert_sizes is not None:
            accepted = (f"a sequence of n_experts={self.n_experts} integers in "
                        f"[0, d_expert={self.d_expert}]")
            try:
                sizes = tuple(self.expert_sizes)
            except TypeError:
                fail("MoEConfig.expert_sizes", self.expert_sizes, accepted)
            require(len(sizes) == self.n_experts, "MoEConfig.expert_sizes", self.expert_sizes,
                    accepted)
            put("expert_sizes", tuple(integer(f"MoEConfig.expert_sizes[{i}]", s, low=0,
                                              high=self.d_expert)
                                      for i, s in enumerate(sizes)))
        if self.router_block is not None:
            accepted = f"(start, stop) with 0 ≤ start < stop ≤ d_model={self.d_model}"
            try:
                start, stop = self.router_block
            except (TypeError, ValueError):
                fail("MoEConfig.router_block", self.router_block, accepted)
            start = integer("MoEConfig.router_block[0]", start, low=0)
            stop = integer("MoEConfig.router_block[1]", stop, high=self.d_model)
            require(start < stop, "MoEConfig.router_block", self.router_block, accepted)
            put("router_block", (start, stop))
        if self.entity_codes is None:
            require(self.code_start is None, "MoEConfig.code_start", self.code_start,
                    "None unless entity_codes (the codes' rank) is set")
        else:
            int_field("entity_codes", 1, self.d_model)
            require(self.code_start is not None, "MoEConfig.code_start", None,
                    f"the first token id with a fixed code, in [0, vocab_size-1="
                    f"{self.vocab_size - 1}], when entity_codes={self.entity_codes} is set")
            int_field("code_start", 0, self.vocab_size - 1)

    @classmethod
    def dense(cls, vocab_size: int, max_len: int, d_ff: int, **kw) -> "MoEConfig":
        """The dense (non-MoE) layer of Theorem 4.1: one expert holding all ``d_ff`` neurons.

        With a single expert the router's softmax is identically 1, so the layer is an ordinary
        FFN and the Switch gate multiplies by exactly 1.
        """
        for fixed in ("n_experts", "top_k", "d_expert"):
            require(fixed not in kw, f"MoEConfig.dense({fixed}=…)", kw.get(fixed),
                    "no value: the dense layer fixes it; pass d_ff for the FFN width")
        return cls(vocab_size=vocab_size, max_len=max_len, n_experts=1, top_k=1,
                   d_expert=d_ff, **kw)

    @property
    def head_dim(self) -> int:
        """Per-head width: ``d_head`` if given, else ``d_model // n_heads``."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def attn_width(self) -> int:
        """Width of the concatenated head outputs, ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def neurons_per_expert(self) -> tuple[int, ...]:
        """Live neurons of each expert (``d_expert`` each unless ``expert_sizes`` is given)."""
        if self.expert_sizes is None:
            return (self.d_expert,) * self.n_experts
        return self.expert_sizes

    def replace(self, **changes) -> "MoEConfig":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


def _default(name: str):
    return MoEConfig.__dataclass_fields__[name].default


@dataclass(frozen=True)
class MoEShape:
    """The part of an :class:`MoEConfig` an experiment chooses: expert count and widths, heads,
    depth, and the rank of fixed entity codes (``entity_codes``).  The data fix the rest
    (``vocab_size``, ``max_len``, ``code_start``: :meth:`config`).

    The fields are MoEConfig's, with its defaults, and MoEConfig validates them: a shape is
    checked by building the MoEConfig of a two-token vocabulary, so the errors name
    ``MoEConfig.<field>`` and no rule is written twice.  The one rule of its own: without an
    explicit ``d_head`` (a shape has none) ``n_heads`` must divide ``d_model``.
    """

    n_experts: int = _default("n_experts")
    d_model: int = _default("d_model")
    n_heads: int = _default("n_heads")
    d_expert: int = _default("d_expert")
    n_layers: int = _default("n_layers")
    entity_codes: int | None = _default("entity_codes")

    def __post_init__(self) -> None:
        probe = MoEConfig(vocab_size=2, max_len=1, d_head=1, **asdict(self),
                          code_start=None if self.entity_codes is None else 1)
        for name in asdict(self):                  # NumPy integers stored as Python ints
            object.__setattr__(self, name, getattr(probe, name))
        require(self.d_model % self.n_heads == 0, "MoEShape.d_model", self.d_model,
                f"an integer ≥ 1 divisible by n_heads={self.n_heads}")

    def config(self, vocab_size: int, max_len: int, **fixed) -> MoEConfig:
        """The MoEConfig of this shape for a vocabulary and a sequence length, with the
        ``fixed`` fields an experiment sets for every run (e.g. ``top_k=1, gate="switch"``)."""
        return MoEConfig(vocab_size=vocab_size, max_len=max_len, **asdict(self), **fixed)

    def replace(self, **changes) -> "MoEShape":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)
