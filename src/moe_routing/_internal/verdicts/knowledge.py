"""Rules of the knowledge chapter: the task-complexity bound and shared prefixes.

Each rule is a pure function of counts the chapter measured; its reason names the numbers.
"""

from __future__ import annotations

from ..validation import integer, require
from . import rule


@rule
def complexity_bound(n_within: int, n_tasks: int) -> tuple[str, str]:
    """A-task-complexity: the complexity c(k) = Σ_{τ∈T(k)} |τ| + |Δ_k| is implemented, and
    ``c(k) ≤ L·|T(k)| + N`` for every task of the dataset.

    ``n_within`` tasks satisfy the bound out of ``n_tasks``.  The bound follows from the
    definitions in one line (each template has at most L positions, each dictionary at most N
    entries), so no dataset could contradict it: its holding shows that our c(k), L and N are
    implemented as defined, not that a result of the paper came out again.  Hence the verdict
    *holds by definition* when it holds for every task, and *not reproduced* as soon as one
    task exceeds it (a bug in the complexity or in L, N).  There is no tolerance and no
    "partly": a definition is implemented or it is not.
    """
    n_tasks = integer("n_tasks", n_tasks, low=1)
    n_within = integer("n_within", n_within, low=0)
    require(n_within <= n_tasks, "n_within", n_within, f"at most n_tasks={n_tasks}")
    if n_within == n_tasks:
        return "holds by definition", (f"c(k) ≤ L·|T(k)| + N for all {n_tasks} tasks, as the "
                                       "definitions imply: our c(k), L and N are consistent")
    return "not reproduced", (f"c(k) > L·|T(k)| + N for {n_tasks - n_within} of {n_tasks} "
                              "tasks: the implementation contradicts the definitions")


@rule
def shared_prefixes(n_ambiguous: int, n_prefixes: int) -> tuple[str, str]:
    """X-shared-prefixes (the book's claim): some prefixes are continued by sentences of two
    or more tasks, so the prefix alone cannot say which task it belongs to.

    ``n_ambiguous`` of the ``n_prefixes`` distinct prefixes (trie nodes) are continued by at
    least two tasks. One such prefix is enough for the claim ("routing on structure cannot be
    task-pure at *every* prefix"): *our extension* when ``n_ambiguous ≥ 1``; *not reproduced*
    when no prefix is shared (then every prefix determines its task and the claim is false for
    this dataset).
    """
    n_prefixes = integer("n_prefixes", n_prefixes, low=1)
    n_ambiguous = integer("n_ambiguous", n_ambiguous, low=0)
    require(n_ambiguous <= n_prefixes, "n_ambiguous", n_ambiguous,
            f"at most n_prefixes={n_prefixes}")
    if n_ambiguous >= 1:
        return "our extension", (f"{n_ambiguous} of {n_prefixes} prefixes are continued by "
                                 "≥ 2 tasks (≥ 1 needed)")
    return "not supported", f"none of the {n_prefixes} prefixes is shared by two tasks"


__all__ = ["complexity_bound", "shared_prefixes"]
