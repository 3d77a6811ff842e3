"""Gate: decides every request before anything runs. Pure computation, no side effects."""
