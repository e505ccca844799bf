"""Muon's optimizer step: `torch.optim.Muon` (Newton–Schulz always in bfloat16) vs ours (`train/muon.py`, float32
on a CPU), on the decoder matrices of the tiny model and of a real checkpoint, interleaved in one run.

On a CPU without native bfloat16 matrix units (AVX2-only x86) torch's step is dominated by emulated bfloat16
matmuls. Reported: each optimizer's seconds per step (median, min, max over `--repeats`), their ratio, the CPU's
bfloat16 flags and CPU steal (/proc/stat) over the run.

    python benchmarks/muon_step.py [--policy smollm2-135m] [--layers 2] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.models.sources import resolve_model
from agentic_rl.models.tiny.build import build_tiny_for_env
from agentic_rl.train.muon import Muon


def steal() -> tuple[int, int]:
    """(steal jiffies, all jiffies) of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[7], sum(fields)


def decoder_matrices(model_dir: Path, layers: int) -> list[torch.nn.Parameter]:
    """The parameters sft.py gives Muon (2-D weights inside the decoder layers) of the first `layers` layers, with
    a fixed random gradient. Every layer has the same shapes, so a step over all of them costs proportionally more."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    mats = [p for n, p in model.named_parameters() if p.ndim == 2 and any(f".layers.{i}." in n for i in range(layers))]
    g = torch.Generator().manual_seed(0)
    for p in mats:
        p.grad = torch.randn(p.shape, generator=g) * 1e-3
    return mats


def step_seconds(opt: torch.optim.Optimizer) -> float:
    """Wall seconds of one `opt.step()`."""
    t0 = time.perf_counter()
    opt.step()
    return time.perf_counter() - t0


def spread(xs: list[float]) -> dict[str, float]:
    """Median, min and max, rounded."""
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2-135m", help="a preset or model directory beside the tiny model")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2, help="decoder layers whose matrices step (torch's step on all "
                    "30 of SmolLM2's takes ~20 minutes on an AVX2-only CPU)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    flags = sorted({f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
                    for f in line.split(":", 1)[1].split() if "bf16" in f or f.startswith("amx")})
    dirs = {"tiny": build_tiny_for_env(make_env("tool_use"), Path(tempfile.mkdtemp()) / "tiny"),
            args.policy: resolve_model(args.policy)}
    out: dict = {"cpu_bf16_flags": flags, "layers": args.layers, "models": {}}
    s0 = steal()
    for name, d in dirs.items():
        mats = decoder_matrices(d, args.layers)
        opts = {"torch": torch.optim.Muon(mats, lr=1e-5, adjust_lr_fn="match_rms_adamw"),
                "ours": Muon(mats, lr=1e-5, adjust_lr_fn="match_rms_adamw")}
        times: dict[str, list[float]] = {"torch": [], "ours": []}
        for r in range(args.repeats):
            for k in (("torch", "ours") if r % 2 == 0 else ("ours", "torch")):
                times[k].append(step_seconds(opts[k]))
        out["models"][name] = {"matrices": len(mats), "parameters": sum(p.numel() for p in mats),
                               "torch_s": spread(times["torch"]), "ours_s": spread(times["ours"]),
                               "ours_over_torch": spread([o / t for o, t in zip(times["ours"], times["torch"])])}
        print(json.dumps({name: out["models"][name]}), flush=True)
    s1 = steal()
    out["cpu_steal_pct"] = round(100 * (s1[0] - s0[0]) / max(s1[1] - s0[1], 1), 3)
    print(json.dumps({"cpu_bf16_flags": flags, "cpu_steal_pct": out["cpu_steal_pct"]}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
