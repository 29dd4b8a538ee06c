"""Cells -> units of work: shards, boots and the order of their steps (A/B pairing)."""
