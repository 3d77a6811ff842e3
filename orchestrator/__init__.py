"""Sandbox orchestrator."""
