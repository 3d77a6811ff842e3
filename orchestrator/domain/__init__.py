"""Pure models, ids and errors. No I/O here."""
