"""Docker backend."""
