"""README's "How to add an environment" example, run as written: it must pass check_env and the doctor, by name."""

import re
import sys
import types
from pathlib import Path

from agentic_rl.envs import check_env, make_env
from agentic_rl.evaluation.doctor import run_doctor

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_module(monkeypatch) -> types.ModuleType:
    section = README.read_text(encoding="utf-8").split("## How to add an environment", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("my_envs")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "my_envs", module)
    return module


def test_the_readme_env_holds_the_contract_and_passes_the_doctor(monkeypatch):
    _readme_module(monkeypatch)
    factory = lambda: make_env("my_envs:ReverseEnv")
    assert check_env(factory, n=40) == []
    checks = {c.name: c for c in run_doctor(factory, n=8)}
    assert all(c.verdict == "PASS" for c in checks.values()), checks
    env = factory()
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    first = env.step(env.teacher_turn(task, env.reset(task)))
    assert first.turn.tool == "reverse" and first.observation[0]["content"] == task.answer


def test_a_module_class_spec_that_is_not_an_env_is_a_clear_error():
    import pytest

    with pytest.raises(ValueError, match="cannot load env 'nowhere:Env'"):
        make_env("nowhere:Env")
    with pytest.raises(ValueError, match="is not an Env subclass"):
        make_env("json:JSONDecoder")


def test_the_readme_env_loads_from_the_current_directory_as_readme_says(tmp_path):
    """`agentic-rl doctor --env my_envs:ReverseEnv` in the directory that holds my_envs.py, with no PYTHONPATH."""
    import os
    import subprocess

    section = README.read_text(encoding="utf-8").split("## How to add an environment", 1)[1]
    (tmp_path / "my_envs.py").write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    script = Path(sys.executable).parent / "agentic-rl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(script), "doctor", "--env", "my_envs:ReverseEnv", "--n", "4"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "doctor: my_envs:ReverseEnv" in r.stdout and "FAIL" not in r.stdout
    r = subprocess.run([str(script), "doctor", "--env", "nowhere_here:ReverseEnv"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no module named 'nowhere_here' in the current directory" in r.stdout
    assert f"({tmp_path})" in r.stdout  # where it looked
