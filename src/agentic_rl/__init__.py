"""agentic-rl: train LLM agents to use tools well — SFT, then agentic GRPO with verifiable rewards."""

__version__ = "0.1.0"
