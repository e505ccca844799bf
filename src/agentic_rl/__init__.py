"""agentic-rl: train LLM agents to use tools well — SFT, then agentic GRPO with verifiable rewards."""

import os

if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # one of several training processes (torchrun, accelerate launch):
    # OpenMP threads that wait must not spin, or they slow the other processes' work (train/distributed.py). Set
    # before torch is imported, which reads it once.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
