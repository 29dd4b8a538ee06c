"""Records handed between stages: pydantic, frozen, no I/O.

They import nothing of iomatrix but errors (checked by make lint).
"""
