"""A Hugging Face causal LM as a policy: the batched multi-turn sampler and its speed paths (packed GQA attention,
an in-place KV cache, last-position prefill)."""

from .sampler import HFPolicy, HFSession, SamplingConfig, TokenContinuityError

__all__ = ["HFPolicy", "HFSession", "SamplingConfig", "TokenContinuityError"]
