"""Budget grants ("grant" means this only): a tenant may run what matches conditions without asking, within
budgets. ``book`` keeps them (reserve, settle, release), ``cover`` fits them into a run's flow, ``ledger``
says what the book asks of its store. Session approvals (approve for the session) are ``approvals.session``."""
