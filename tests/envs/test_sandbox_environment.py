"""No sandboxed program reads the trainer's environment variables (issue 39's audit: 45 of them reached the agent).

A canary planted in the trainer's environment — as a user's WANDB_API_KEY or HF_TOKEN would be — must not reach
any program the agent runs: math's python tool, codefix's test runs, warm (the fork server) or cold.
"""

from __future__ import annotations

import secrets
import textwrap

import pytest

from agentic_rl.envs.codefix.runner import server
from agentic_rl.envs.codefix.sandbox import Sandbox, isolation_available
from agentic_rl.envs.math.python_tool import python
from agentic_rl.runtime.tools import ToolError

PROGRAM = textwrap.dedent("""
    import os
    print(sorted(os.environ.items()))
    for pid in (os.getpid(), os.getppid(), 1):  # what /proc would tell, where the sandbox has a /proc
        try:
            print(open(f"/proc/{pid}/environ", "rb").read())
        except OSError as e:
            print("no /proc:", type(e).__name__)
""")


@pytest.fixture
def canary(monkeypatch):
    """A secret in the trainer's environment, under names a user's credentials have; the fork server restarted so it
    starts under this environment too."""
    value = "canary-" + secrets.token_hex(8)
    for name in ("AGENTIC_RL_TEST_CANARY", "WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, value)
    server().close()
    yield value
    server().close()


@pytest.mark.parametrize("warm", [True, False], ids=["fork-server", "cold"])
def test_a_sandboxed_program_sees_only_the_sandboxs_environment(canary, tmp_path, warm):
    res = Sandbox(tmp_path, warm=warm).run(["python", "-c", PROGRAM])
    assert res.outcome == "ok", res.stderr
    assert canary not in res.stdout + res.stderr and "WANDB_API_KEY" not in res.stdout
    assert "'PATH'" in res.stdout  # the program did print its environment: the sandbox's own allow-list
    if isolation_available():  # the jail has no /proc; without it (not root) only rlimits hold, as documented
        assert res.stdout.count("no /proc") == 3


def test_a_test_run_sees_only_the_sandboxs_environment(canary, tmp_path):
    (tmp_path / "test_env.py").write_text(f"def test_env():\n    exec({PROGRAM!r})\n    assert False\n")
    res = Sandbox(tmp_path).run(["python", "-m", "pytest", "-q", "-s", "test_env.py"])
    assert "'PATH'" in res.stdout and canary not in res.stdout + res.stderr


def test_the_math_python_tool_sees_only_the_sandboxs_environment(canary):
    try:
        out = python(PROGRAM)
    except ToolError as e:  # the tool shows only the tail of what was printed; an error would say what went wrong
        pytest.fail(f"the program failed: {e}")
    assert canary not in out
    out = python("import os\nprint([k for k in os.environ])")
    assert "AGENTIC_RL_TEST_CANARY" not in out and "HF_TOKEN" not in out and "PATH" in out
