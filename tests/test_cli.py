import json
import subprocess
import sys
from pathlib import Path

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
    assert r.exit_code == 2 and "valid envs: codefix, game, math, sql, tool_use, toolcall" in r.output
    r = runner.invoke(app, ["sft", "--out", "/tmp/never", "learning_rate=3"])
    assert r.exit_code == 2 and "unknown key 'learning_rate'" in r.output


def test_console_script_is_installed():
    from pathlib import Path

    script = Path(sys.executable).parent / "agentic-rl"  # the entry point pip wrote next to this interpreter
    assert script.exists(), f"no console script at {script}: is the package installed (pip install -e .)?"
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "sft" in r.stdout and "rollout" in r.stdout and "models" in r.stdout


def test_help_lists_every_config_key_with_its_docstring():
    from agentic_rl.train.sft import SFTConfig

    r = runner.invoke(app, ["sft", "--help"])
    assert r.exit_code == 0, r.output
    for key in ("lr", "epochs", "lora.r", "tiny.hidden", "max_new_tokens", "env_args"):
        assert f" {key} " in r.output, key
    squeeze = lambda text: "".join(c for c in text if c not in "│ \n")  # a wrapped table cell reads as one line
    assert squeeze(SFTConfig.model_fields["lr"].description) in squeeze(r.output)
    for command, key in [("run", "greedy_eval"), ("grpo", "kl_estimator"), ("eval", "robustness_tasks"),
                         ("rollout", "task_id"), ("doctor", "group"), ("probe-hacks", "env_args")]:
        r = runner.invoke(app, [command, "--help"])
        assert r.exit_code == 0 and f" {key} " in r.output, (command, r.output)


def _said(r) -> str:
    return " ".join(r.output.split())


def test_every_command_takes_key_value_and_refuses_a_key_it_would_ignore(tmp_path):
    r = runner.invoke(app, ["rollout", "--policy", "teacher", "n=2", "env_args.max_turns=1", "--json",
                            str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    trajs = json.loads((tmp_path / "t.json").read_text())
    assert len(trajs) == 2 and all(t["outcome"] == "truncated" or len(t["turn_rewards"]) == 1 for t in trajs)
    r = runner.invoke(app, ["rollout", "--policy", "teacher", "temperature=0.5"])
    assert r.exit_code == 2 and "policy=teacher samples no tokens, so temperature= would be ignored" in _said(r)
    r = runner.invoke(app, ["eval", "--policy", "noisy-teacher", "--no-robustness", "robustness_tasks=3"])
    assert r.exit_code == 2 and "robustness_tasks= would be ignored" in _said(r)
    r = runner.invoke(app, ["run", "sft.seed=3"])
    assert r.exit_code == 2 and "give seed=" in _said(r)


def test_a_bad_env_argument_is_one_clear_line_in_every_command():
    for command in (["sft", "--out", "/tmp/never"], ["grpo", "--out", "/tmp/never"], ["run", "--out", "/tmp/never"],
                    ["rollout", "--policy", "teacher"], ["eval", "--policy", "teacher"],
                    ["doctor"], ["probe-hacks", "--env", "tool_use"]):
        r = runner.invoke(app, [*command, "env_args.bogus=1"])
        assert r.exit_code == 2, (command, r.output)
        assert "env tool_use takes no argument 'bogus'" in _said(r) and "fault_rate" in r.output, (command, r.output)
        assert "Traceback" not in r.output


def test_an_envs_own_turn_budget_applies_wherever_the_env_is_used(tiny_dir):
    from agentic_rl.commands import EvalConfig, RolloutConfig
    from agentic_rl.config import load_config
    from agentic_rl.envs import make_env

    codefix, tool_use = make_env("codefix"), make_env("tool_use")
    for cls in (EvalConfig, RolloutConfig):
        assert cls(env="codefix", policy=str(tiny_dir)).load(codefix).sampling.max_new_tokens == 192
        assert cls(policy=str(tiny_dir)).load(tool_use).sampling.max_new_tokens == 96
        cfg = load_config(cls, None, ["env=codefix", f"policy={tiny_dir}", "max_new_tokens=64"])
        assert cfg.load(codefix).sampling.max_new_tokens == 64  # the user's value wins


def test_without_a_terminal_training_and_evaluation_print_plain_progress_lines(monkeypatch, tmp_path, tiny_dir):
    """No bar and no spinner where nobody sees one (nohup, CI, a log): a plain line with the progress, the elapsed
    time and an ETA (here one per update: the time between lines is set to 0)."""
    from agentic_rl import ui

    from .conftest import SMALL_SFT

    monkeypatch.setattr(ui, "PLAIN_EVERY_S", 0.0)
    r = runner.invoke(app, ["sft", "--out", str(tmp_path / "s"), *SMALL_SFT, "demos=16", "max_steps=3",
                            "batch_size=8", "eval_every=0", "eval_tasks=2", "final_eval_samples=1",
                            "teacher_samples=1"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("SFT loss")]
    assert [ln.split()[3] for ln in lines] == ["1/3", "2/3", "3/3"], r.output
    assert all(" · elapsed 0:00:" in ln and " · ETA " in ln for ln in lines)
    r = runner.invoke(app, ["eval", "--policy", str(tiny_dir), "--n", "3", "--k", "1", "--no-robustness",
                            "max_new_tokens=8"])
    assert r.exit_code == 0, r.output
    assert "evaluating: main run: episodes 3/3 · elapsed" in r.output, r.output


def test_transformers_weight_loading_bars_show_only_with_verbose(tiny_dir):
    script = Path(sys.executable).parent / "agentic-rl"
    args = ["rollout", "--policy", str(tiny_dir), "--n", "1", "--quiet", "max_new_tokens=4"]
    quiet = subprocess.run([str(script), *args], capture_output=True, text=True)
    verbose = subprocess.run([str(script), "--verbose", *args], capture_output=True, text=True)
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr + verbose.stderr
    assert "Loading weights" not in quiet.stderr and "Loading weights" in verbose.stderr


def test_commands_that_run_no_model_load_no_model_code(tmp_path):
    """rollout, eval, doctor and probe-hacks with a scripted policy never import the sampler and its model stack."""
    code = ("import sys; from typer.testing import CliRunner; from agentic_rl.cli import app; "
            "r = CliRunner().invoke(app, ['rollout', '--env', 'game', '--policy', 'teacher', '--n', '2']); "
            "assert r.exit_code == 0, r.output; print('agentic_rl.policies.hf.sampler' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_a_bad_agent_or_tasks_file_is_refused_before_anything_is_written(tmp_path):
    example = Path(__file__).parents[1] / "examples" / "openai_agent.py"
    for args, message in [(["--agent", "openai_agent"], "agent 'openai_agent': give module:function"),
                          (["--agent", f"{example}:walk"], "has no function 'walk' (it has: "),
                          (["--agent", f"{example}:run", f"tasks_file={tmp_path / 'none.jsonl'}"],
                           "none.jsonl: there is no such file"),
                          ([f"tasks_file={tmp_path / 'none.jsonl'}"], "tasks_file")]:
        r = runner.invoke(app, ["grpo", "--out", str(tmp_path / "run"), *args])
        assert r.exit_code == 2 and message in r.output, (args, r.output)
        assert not (tmp_path / "run").exists()


def test_probe_hacks_on_toolcall_lists_the_exploits_and_the_per_call_credit_probes(tmp_path):
    out = tmp_path / "rows.json"
    r = runner.invoke(app, ["probe-hacks", "--env", "toolcall", "--n", "5", "--json", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    names = {row["exploit"] for row in rows}
    assert {"call_every_tool", "guessed_id", "per_call:shotgun_values", "per_call:call_on_a_no_call_task"} <= names
    assert all(row["holds"] for row in rows if "holds" in row) and "NO" not in r.output
    assert "per_call:shotgun_values" in r.output
