"""The acceptance run: default SFT on tool_use, then the checkpoint loaded by plain transformers. Slow (~10 min)."""

import json
import subprocess
import sys

import pytest

PLAIN_HF = r'''
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
tok, model = AutoTokenizer.from_pretrained(d), AutoModelForCausalLM.from_pretrained(d)
msgs = json.loads(sys.argv[2])
ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
out = model.generate(ids, max_new_tokens=64, do_sample=False)
print(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False))
assert "agentic_rl" not in sys.modules
'''


@pytest.mark.slow
def test_default_sft_reaches_the_noisy_teacher_and_loads_with_plain_transformers(tmp_path, env):
    out = tmp_path / "sft"
    subprocess.run([sys.executable, "-m", "agentic_rl.cli", "sft", "--env", "tool_use", "--out", str(out)], check=True)
    s = json.loads((out / "summary.json").read_text())
    assert s["wall_seconds"] <= 600
    assert abs(s["eval"]["success_rate"] - s["teacher_eval"]["success_rate"]) <= 0.10, s
    task = next(t for t in env.tasks("eval", 50) if t.kind == "calc")
    msgs = env.reset(task)
    r = subprocess.run([sys.executable, "-c", PLAIN_HF, str(out / "model"), json.dumps(msgs)], capture_output=True,
                       text=True, check=True)
    text = r.stdout.strip().removesuffix("<|im_end|>")
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>"), text
    call = json.loads(text[len("<tool_call>"):-len("</tool_call>")])
    assert call["name"] == "calculator" and set(call["arguments"]) == {"expression"}
