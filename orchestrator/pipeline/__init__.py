"""The execution path: a request is authorized (gate, approvals, session approvals, auto-approve, budget
grants), then run in a sandbox (profile, backend, pool, evidence). ``open_orchestrator`` (``factory``) wires
it from a config; ``Orchestrator`` is the façade every front door calls."""
