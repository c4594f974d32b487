"""Policies: the batched policy protocol, baselines, and LLM backends."""
