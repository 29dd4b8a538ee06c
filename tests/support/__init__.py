"""Builders and helpers the tests share (imported as support.*; tests/ is on sys.path
through its conftest.py)."""
