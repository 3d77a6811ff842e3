"""GitHub Actions runner container hooks: the protocol (``protocol``), answered by the controller (``hook``);
``hook.js`` is the file the runner runs (``sandboxctl ci github hook-path``)."""
