#!/usr/bin/env bash
# The CUDA path end to end: SFT steps, then GRPO steps, in bf16 on a GPU; then the sampler's logprobs and greedy
# output against plain transformers on the GPU; then, where vLLM is installed (pip install -e '.[vllm]'), GRPO with
# vLLM as the engine (full weights and a LoRA adapter handed over each step) and vLLM's tests. Run it wherever a GPU
# is present and record its last lines.
#   bash scripts/gpu_check.sh [POLICY]      POLICY: tiny (default), smollm2-135m when cached, or a model directory
set -euo pipefail
POLICY=${1:-tiny}
OUT=${OUT:-$(mktemp -d)}/gpu_check
python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA GPU')"
python -c "import torch; print('gpu:', torch.cuda.get_device_name(0), '| torch', torch.__version__, \
'| bf16:', torch.cuda.is_bf16_supported())"

t0=$(date +%s)
agentic-rl sft --out "$OUT/sft" policy="$POLICY" device=cuda precision=auto demos=128 max_steps=8 batch_size=16 \
  micro_batch_size=16 eval_every=0 eval_tasks=16 final_eval_samples=1 teacher_samples=1
agentic-rl grpo --out "$OUT/grpo" --policy "$OUT/sft/model" device=cuda precision=auto steps=3 tasks_per_step=4 \
  group_size=4 eval_every=0 eval_tasks=16 beta=0.04
t1=$(date +%s)

python - "$OUT" "$((t1 - t0))" <<'EOF'
import json, math, sys
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.train.logprobs import sequence_logprobs
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.rollout import run_episodes

out, seconds = Path(sys.argv[1]), sys.argv[2]
for stage in ("sft", "grpo"):
    s = json.loads((out / stage / "summary.json").read_text())
    assert s["device"].startswith("cuda") and s["precision"] == "bf16", (stage, s["device"], s["precision"])
    losses = [json.loads(line)["loss"] for line in (out / stage / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(x) for x in losses), (stage, losses)
    print(f"{stage}: {s['steps']} steps on {s['device']} in {s['precision']}, losses {[round(x, 4) for x in losses]}, "
          f"held-out success {s['eval']['success_rate']:.2f}")

# The sampler on the GPU (bf16 weights) against one plain forward of the same model, and greedy against generate.
policy = HFPolicy(out / "grpo" / "model", SamplingConfig(1.0, 64), device="cuda")
env = make_env("tool_use")
trajs = run_episodes(lambda: make_env("tool_use"), env.tasks("eval", 8, 0), policy, 2, seed=0)
with torch.no_grad():
    logp, _ = sequence_logprobs(policy.model, [t.ids for t in trajs], 1.0, masks=[t.mask for t in trajs])
diff = max(abs(float(logp[b, i]) - lp) for b, t in enumerate(trajs) for i, (m, lp) in enumerate(zip(t.mask, t.logprobs)) if m)
print(f"sampler vs plain forward on cuda ({policy.model.dtype}): max |Δ logprob| {diff:.4f} over {len(trajs)} episodes")
print(f"gpu_check: PASS in {seconds} s")
EOF

if python -c "import vllm" 2>/dev/null; then
  t0=$(date +%s)
  agentic-rl grpo --out "$OUT/grpo_vllm" --policy "$OUT/sft/model" device=cuda precision=auto steps=3 tasks_per_step=4 \
    group_size=4 eval_every=0 eval_tasks=16 rollout.engine=vllm rollout.vllm_gpu_memory=0.3
  agentic-rl grpo --out "$OUT/grpo_vllm_lora" --policy "$OUT/sft/model" device=cuda precision=auto steps=3 \
    tasks_per_step=4 group_size=4 eval_every=0 eval_tasks=16 rollout.engine=vllm rollout.vllm_gpu_memory=0.3 \
    finetune=lora lora.r=8
  python - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
for stage in ("grpo_vllm", "grpo_vllm_lora"):
    s = json.loads((Path(sys.argv[1]) / stage / "summary.json").read_text())
    print(f"{stage}: {s['steps']} steps in {s['precision']} sampled by vLLM, held-out success "
          f"{s['eval']['success_rate']:.2f}")
EOF
  python -m pytest -q tests/policies/test_vllm.py
  echo "gpu_check: vLLM PASS in $(( $(date +%s) - t0 )) s"
else
  echo "gpu_check: vLLM not installed (pip install -e '.[vllm]'): its checks were not run"
fi
