"""Prefix tries over token-id sequences: valid next tokens V(w) and the tasks behind a prefix."""

from .valid_next import PrefixTrie, csr_groups

__all__ = ["PrefixTrie", "csr_groups"]
