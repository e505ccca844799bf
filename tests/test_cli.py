import json
import subprocess
import sys

from typer.testing import CliRunner

from agentic_rl.cli import app

runner = CliRunner()


def test_rollout_prints_trajectories_and_writes_json(tmp_path):
    out = tmp_path / "t.json"
    r = runner.invoke(app, ["rollout", "--env", "tool_use", "--policy", "noisy-teacher", "--n", "4", "--group", "2",
                            "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "assistant" in r.output and "reward" in r.output and "success_rate" in r.output
    trajs = json.loads(out.read_text())
    assert len(trajs) == 8 and all({"messages", "reward", "outcome", "turn_rewards"} <= set(t) for t in trajs)


def test_rollout_one_task_by_id_and_a_script_policy(tmp_path, env):
    task = next(t for t in env.tasks("eval", 50) if t.kind == "calc")
    script = tmp_path / "s.json"
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": dict(task.reference_calls[0][1])}}]}
    script.write_text(json.dumps([call, "<tool_call>{\"name\": \"calculator\"", task.answer]))
    r = runner.invoke(app, ["rollout", "--policy", f"script:{script}", "--task-id", task.id, "--json",
                            str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.output
    (t,) = json.loads((tmp_path / "o.json").read_text())
    assert t["task_id"] == task.id and t["success"] and len(t["turn_rewards"]) == 3
    assert t["messages"][5]["content"].startswith("error:")  # the malformed second turn got an error observation


def test_bad_input_gets_a_clear_error():
    r = runner.invoke(app, ["rollout", "--policy", "gpt-5"])
    assert r.exit_code == 2 and "unknown policy 'gpt-5'" in r.output and "noisy-teacher" in r.output
    r = runner.invoke(app, ["rollout", "--env", "chess", "--policy", "teacher"])
    assert r.exit_code == 2 and "valid envs: codefix, tool_use" in r.output
    r = runner.invoke(app, ["sft", "--out", "/tmp/never", "learning_rate=3"])
    assert r.exit_code == 2 and "unknown key 'learning_rate'" in r.output


def test_console_script_is_installed():
    from pathlib import Path

    script = Path(sys.executable).parent / "agentic-rl"  # the entry point pip wrote next to this interpreter
    assert script.exists(), f"no console script at {script}: is the package installed (pip install -e .)?"
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "sft" in r.stdout and "rollout" in r.stdout and "models" in r.stdout
