from rich.console import Console

from agentic_rl.ui import eval_table


def _text(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_eval_table_puts_policies_side_by_side_with_success_per_kind():
    teacher = {"success_rate": 0.77, "mean_reward": 0.75, "success_by_kind": {"calc": 0.8, "search": 0.75}}
    sft = {"success_rate": 0.70, "mean_reward": 0.68, "success_by_kind": {"calc": 0.76}}
    lines = _text(eval_table({"noisy teacher": teacher, "sft": sft}, {"sft": {"success_rate": 0.89}})).splitlines()
    row = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in lines if "│" in line}
    assert row["success_rate"] == ["0.770", "0.700"]
    assert row["success_rate (greedy)"] == ["—", "0.890"]  # the teacher has no greedy run
    assert row["success · calc"] == ["0.800", "0.760"]
    assert row["success · search"] == ["0.750", "—"]  # a kind one policy never met is shown as missing, not 0
    assert row["tool_calls_per_episode"] == ["—", "—"]
