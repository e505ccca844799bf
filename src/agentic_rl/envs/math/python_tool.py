"""The math env's `python` tool: the agent's program runs in codefix's sandbox (its own uid, an allow-list root with
the standard library only, no network, rlimits, a CPU-time limit) in a fresh empty directory removed afterwards.
As for codefix, disk quota is out of scope (docs/codefix-threat-model.md): files are capped at 1 MiB each and a run at
5 s of CPU time."""

from __future__ import annotations

import tempfile

from ...runtime.tools import ToolError
from ..codefix.files import remove_tree
from ..codefix.sandbox import Limits, Sandbox

CODE_LIMIT = 2000  # characters of a program
OUTPUT_LIMIT = 1000  # characters of what it prints, shown to the agent (the tail)
# 5 s of CPU time decide; 15 s of wall clock only stop a program that waits (see Limits).
LIMITS = Limits(cpu_seconds=5, wall_seconds=15, memory_bytes=512 << 20, file_bytes=1 << 20, processes=8)


def python(code: str) -> str:
    """Run a short Python program (standard library only) and show what it prints.

    Args:
        code: The program, for example "print(37 * 84)".
    """
    if not code.strip():
        raise ToolError("code is empty; print the value you need, for example print(37 * 84)")
    if len(code) > CODE_LIMIT:
        raise ToolError(f"code too long ({len(code)} characters, at most {CODE_LIMIT})")
    root = tempfile.mkdtemp(prefix="agentic-rl-math-")
    try:
        res = Sandbox(root, LIMITS).run(["python", "-c", code])
    finally:
        remove_tree(root)
    if res.timed_out:  # not the partial output: the same program must give the same observation
        raise ToolError(f"timeout: the program did not finish in {LIMITS.cpu_seconds:g} s")
    if res.outcome != "ok":
        lines = res.stderr.strip().splitlines()
        raise ToolError(lines[-1][-OUTPUT_LIMIT:] if lines else f"the program ended with {res.outcome}")
    out = res.stdout.strip()
    return out[-OUTPUT_LIMIT:] if out else "(no output: print the value you need)"
