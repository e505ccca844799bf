"""Trainers (SFT, GRPO) and what they share: the loss maths, logprobs over a shared prefix, LoRA, checkpoints,
run directories and metric tracking."""
