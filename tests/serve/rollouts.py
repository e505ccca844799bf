"""Test helper: open a rollout on a running gateway the way a client does."""

import httpx


def open_rollout(base: str, name: str = "") -> str:
    """`POST /rollouts`: the new rollout's id."""
    r = httpx.post(f"{base}/rollouts", json={"name": name}, timeout=60)
    assert r.status_code == 201, r.text
    return r.json()["id"]
