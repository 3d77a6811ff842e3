"""The service layer: wires the parts together."""
