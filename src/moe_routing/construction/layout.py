"""Blocks of the residual stream of the hand-built transformer (our layout).

    [ TOK | POS | H1 ]  [ ENTC | H2 ]  [ OUT_SYN | OUT_KEY | OUT_VAL ]
      syntactic block     semantic        output block (the only one W_U reads)

* TOK  (n_types)  one-hot of the current token's *type* (entities share the type ENT)
* POS  (max_len)  one-hot of the current position
* H1   (n_types)  head 1's output: the structural code Σ_j α_j e_{s_j}
* ENTC (d_c + K)  an entity token's code c(e) and its key indicators 1[e ∈ keys(Δ_k)]
* H2   (d_c + K)  head 2's output: ENTC of the subject (≈, up to the attention leak)
* OUT_SYN (n_special + n_syntactic)  one coordinate per word/special token (EOS included)
* OUT_KEY (K)     "all keys of Δ_k" directions;  OUT_VAL (d_c)  value code

The router reads ``[TOK | POS | H1]`` only (``MoEConfig.router_block``): the template structure.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._internal.validation import choice


@dataclass(frozen=True)
class Layout:
    n_types: int
    max_len: int
    d_code: int
    n_tasks: int
    n_out_syn: int

    def _sizes(self):
        K, dc = self.n_tasks, self.d_code
        return [("TOK", self.n_types), ("POS", self.max_len), ("H1", self.n_types),
                ("ENTC", dc + K), ("H2", dc + K), ("OUT_SYN", self.n_out_syn),
                ("OUT_KEY", K), ("OUT_VAL", dc)]

    def block(self, name: str) -> slice:
        """Coordinates of block ``name`` in the residual stream."""
        sizes = self._sizes()
        choice("name", name, [n for n, _ in sizes])
        start = 0
        for n, size in sizes:
            if n == name:
                break
            start += size
        return slice(start, start + size)

    @property
    def d_model(self) -> int:
        return sum(s for _, s in self._sizes())

    @property
    def router_block(self) -> tuple[int, int]:
        return (0, self.block("H1").stop)

    @property
    def d_head(self) -> int:
        return max(self.n_types, self.d_code + self.n_tasks)

    def blocks(self) -> dict[str, tuple[int, int]]:
        return {n: (self.block(n).start, self.block(n).stop) for n, _ in self._sizes()}
