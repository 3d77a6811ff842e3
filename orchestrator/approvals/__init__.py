"""Approval providers: rule-based, terminal, store-backed queue."""
