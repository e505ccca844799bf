"""Outgrowing one process: rollout workers on Ray (ray_rollout.py)."""
