"""Approvals: the providers (rule-based, terminal, store-backed queue, auto-approve) with their timeout, and
session approvals (``session.SessionApprovals``: approved_for_session, an exec session's own input).
Budget grants are ``orchestrator.budgets``."""
