"""vLLM as the sampling engine on a GPU (`rollout.engine=vllm`): the env's multi-turn episodes sampled by vLLM, with
the same trajectories a local session records.

Token ids in, token ids out: every turn's prompt is the episode's ids so far (our renderer's, never re-tokenized
text) plus the template's continuation after the last sampled turn, and the ids vLLM sampled are kept as they are,
with their logprobs under the sampling temperature (`logprobs_mode="processed_logprobs"`, what the loss compares
with). The G samples of a task share their prompt through vLLM's prefix cache. After every optimizer step the learner
hands over its weights (`load_weights`: vLLM's own loader, in this process) or, with LoRA, its adapter
(`load_adapter`: a new LoRA request per version); the prefix cache is reset with the weights, since it holds keys
and values of the old ones. vLLM runs in the trainer's process on the trainer's GPU, sharing it
(`gpu_memory_utilization`), as TRL's colocate mode does.

It needs a CUDA GPU and the vllm extra (`pip install -e '.[vllm]'`); on the CPU it is refused before anything runs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..envs.base import Env, Message, Task, stable_hash
from ..runtime.render import Renderer
from .base import Policy, SamplingConfig, Session, TokenRecord, Turn
from .hf.sampler import TokenContinuityError


def check_vllm() -> None:
    """Raise a ValueError naming what is missing when vLLM cannot run here (no GPU, or not installed)."""
    if not torch.cuda.is_available():
        raise ValueError("rollout.engine=vllm needs a CUDA GPU, and torch sees none: use rollout.engine=local (the "
                         "default) on this machine")
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise ValueError("rollout.engine=vllm needs vLLM: pip install -e '.[vllm]'") from None


LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the adapter ranks vLLM's LoRA kernels are built for
DEFAULT_MAX_MODEL_LEN = 8192  # vLLM reserves KV cache for one whole context at start: the model's own can be 128k


def _load_weights(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Run inside vLLM's worker: its model loads HF-named weights with vLLM's own loader (it fuses q/k/v and so on)."""
    worker.model_runner.model.load_weights(weights=weights)
    return len(weights)


class VLLMPolicy(Policy):
    """A model directory served by an in-process vLLM engine on the GPU."""

    def __init__(self, path: str | Path, sampling: SamplingConfig | None = None, gpu_memory_utilization: float = 0.3,
                 lora_rank: int | None = None, max_model_len: int | None = None):
        """max_model_len: the longest episode (None: `sampling.max_context`, else the model's own context up to
        DEFAULT_MAX_MODEL_LEN); lora_rank: the adapter's r, when the learner trains a LoRA adapter."""
        check_vllm()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: weights passed by reference
        from transformers import AutoConfig, AutoTokenizer
        from vllm import LLM

        self.path, self.name = Path(path), f"vllm:{path}"
        self.sampling = sampling or SamplingConfig()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.renderer = Renderer(self.tokenizer)
        own = int(getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", DEFAULT_MAX_MODEL_LEN))
        self.max_context = max_model_len or self.sampling.max_context or min(own, DEFAULT_MAX_MODEL_LEN)
        lora = {}
        if lora_rank:  # vLLM's kernels take a few ranks: the smallest that holds r
            lora = {"enable_lora": True, "max_lora_rank": next((k for k in LORA_RANKS if k >= lora_rank), lora_rank)}
        with _rng_kept():  # vLLM seeds the process's random generators as it starts: the trainer's are kept
            self.llm = LLM(model=str(path), dtype="bfloat16", gpu_memory_utilization=gpu_memory_utilization,
                           enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                           max_model_len=self.max_context, seed=0, **lora)
        self.version, self.lora_request = 0, None

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        return VLLMSession(self, list(tasks), list(samples), seed)

    def load_weights(self, version: int, model: torch.nn.Module) -> None:
        """Take the learner's full weights as `version`."""
        weights = [(k, v.detach()) for k, v in model.state_dict().items()]
        self.llm.collective_rpc(_load_weights, args=(weights,))
        self.llm.reset_prefix_cache()
        self.version = version

    def load_adapter(self, version: int, adapter_dir: str | Path) -> None:
        """Sample with the LoRA adapter saved in `adapter_dir` as `version` (a new request id: vLLM caches by id)."""
        from vllm.lora.request import LoRARequest

        self.lora_request = LoRARequest(f"v{version}", version + 1, str(adapter_dir))
        self.llm.reset_prefix_cache()
        self.version = version


@dataclass
class _Episode:
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    assistant_ids: list[list[int]] = field(default_factory=list)


class VLLMSession(Session):
    """The running episodes' turns, each turn of all of them one `generate` call (vLLM batches them)."""

    def __init__(self, policy: VLLMPolicy, tasks: list[Task], samples: list[int], seed: int):
        self.p, self.tasks, self.samples, self.seed = policy, tasks, samples, seed
        self.eps: dict[int, _Episode] = {}

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts, params = [], []
        for e, conv in zip(episodes, conversations):
            ep = self.eps.get(e)
            if ep is None:  # the first turn: the rendered prompt
                ids = self.p.renderer.render(conv, add_generation_prompt=True).ids
                ep = self.eps[e] = _Episode(list(ids), [0] * len(ids), [0.0] * len(ids))
            else:  # what the template adds after the last sampled turn: the tool's answer, the next header
                new = self.p.renderer.continuation(conv)
                ep.ids += new
                ep.mask += [0] * len(new)
                ep.logprobs += [0.0] * len(new)
            room = self.p.max_context - len(ep.ids)
            if room < 1:
                raise ValueError(f"episode {e}: its {len(ep.ids)} tokens fill vLLM's context ({self.p.max_context}); "
                                 "raise max_context")
            # each turn draws from its own seed (run seed, task, sample, turn): the same tokens in any batch
            turn_seed = stable_hash("vllm", self.seed, self.tasks[e].id, self.samples[e], len(ep.assistant_ids))
            prompts.append(TokensPrompt(prompt_token_ids=list(ep.ids)))
            # ignore_eos: the turn ends at our renderer's end-of-turn token alone, not at the other end-of-sequence
            # ids vLLM reads from generation_config.json
            params.append(SamplingParams(temperature=self.p.sampling.temperature, seed=turn_seed % 2**31,
                                         max_tokens=min(self.p.sampling.max_new_tokens, room), logprobs=0,
                                         ignore_eos=True, stop_token_ids=[self.p.renderer.eos_id],
                                         skip_special_tokens=False, detokenize=False))
        outs = self.p.llm.generate(prompts, params, lora_request=self.p.lora_request, use_tqdm=False)
        turns = []
        for e, out in zip(episodes, outs):
            ep, done = self.eps[e], out.outputs[0]
            ids = list(done.token_ids)
            if done.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"episode {e}: vLLM ended the turn with {done.finish_reason!r}")
            if done.finish_reason == "stop" and ids[-1:] != [self.p.renderer.eos_id]:
                raise RuntimeError(f"episode {e}: vLLM stopped the turn at {done.stop_reason!r}, not at the "
                                   "end-of-turn token")
            logps = [d[t].logprob for t, d in zip(ids, done.logprobs)]
            ep.ids += ids
            ep.mask += [1] * len(ids)
            ep.logprobs += logps
            ep.assistant_ids.append(ids)
            turns.append(Turn(self.p.renderer.decode(ids), "length" if done.finish_reason == "length" else "stop"))
        return turns

    def finish(self, episode: int, conversation: list[Message]) -> TokenRecord:
        """Close the episode with the template's tail; the rendered conversation must reproduce every token."""
        ep = self.eps.pop(episode)
        full = self.p.renderer.render(conversation, assistant_ids=ep.assistant_ids).ids
        if full[:len(ep.ids)] != ep.ids:
            raise TokenContinuityError(f"episode {episode}: the rendered conversation diverges from the tokens vLLM "
                                       "saw; the chat template is not prefix-stable")
        tail = full[len(ep.ids):]
        return TokenRecord(ep.ids + tail, ep.mask + [0] * len(tail), ep.logprobs + [0.0] * len(tail),
                           ep.assistant_ids)


class _rng_kept:
    """Restore Python's, NumPy's and torch's (CPU and CUDA) random state on leaving."""

    def __enter__(self) -> None:
        import numpy as np

        self.state = (random.getstate(), np.random.get_state(), torch.random.get_rng_state(),
                      torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)

    def __exit__(self, *exc: object) -> None:
        import numpy as np

        py, npy, cpu, cuda = self.state
        random.setstate(py)
        np.random.set_state(npy)
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
