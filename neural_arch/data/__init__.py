"""Datasets; no distributed imports (ranks pick their samples through the sampler)."""
