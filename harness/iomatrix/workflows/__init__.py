"""The workflows: what `run`, `ab` and `bisect` do, in what order, end to end (docs/DESIGN.md)."""
