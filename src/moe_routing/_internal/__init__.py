"""The book's plumbing, not the science: what the chapters and the experiments need around the
papers' concepts, kept apart so that ``help(moe_routing)`` and the API reference show what a
researcher uses.  Not a stable interface: every caller is in this repository.

``chapter`` — a chapter's start-up (``begin``: profile, seed, ledger); ``display`` — numbers of
executed cells in the prose (``glue``); ``ledger`` — recording the claims a chapter tests, the
verdict box; ``verdicts`` — one rule per claim, a pure function of the measured quantities;
``plots`` — the figure style; ``progress`` — "what: i of n, elapsed, ETA" lines of long loops;
``runtime`` — devices, seeds, profiles and provenance; ``atomic`` — atomic writes;
``fingerprint`` — the source hashes of cache keys; ``validation`` — the one argument-checking
idiom of the library.
"""
