"""Configs: a key that would be ignored is an error that says why; what the user set is told from the defaults."""

import re

import pytest

from agentic_rl.config import ConfigError, load_config, overlay
from agentic_rl.train.grpo import GRPOConfig
from agentic_rl.train.sft import SFTConfig


@pytest.mark.parametrize("cls, args, says", [
    (SFTConfig, ["policy=runs/x/model", "tiny.hidden=64"], "tiny.hidden: it sizes the built-in tiny model"),
    (SFTConfig, ["lora.r=8"], "lora.r: finetune is full"),
    (SFTConfig, ["finetune=lora", "optimizer=muon"], "optimizer: it is used only with finetune=full"),
    (SFTConfig, ["max_steps=10", "epochs=2"], "epochs: it is used only with max_steps=null"),
    (GRPOConfig, ["kl_estimator=k3_ratio"], "used only with beta > 0"),
    (GRPOConfig, ["gamma=0.9"], "used only with advantage=turn"),
    (GRPOConfig, ["max_resample=5"], "used only with dynamic_sampling=true"),
    (GRPOConfig, ["lora.alpha=8"], "lora.alpha: finetune is full"),
    (GRPOConfig, ["env=chess"], "unknown env 'chess'; valid envs: codefix, game, math, sql, tool_use, toolcall"),
    (GRPOConfig, ["env=codefix", "env_args.kinds=[calc]"], "env codefix takes no argument 'kinds'"),
    (GRPOConfig, ["env_args.kinds=[chess]"], "env tool_use with env_args {'kinds': ['chess']}: unknown"),
    (SFTConfig, ["env_args.max_turns=0"], "env tool_use with env_args {'max_turns': 0}: max_turns must be"),
])
def test_a_key_that_would_be_ignored_or_cannot_work_is_an_error_that_says_why(cls, args, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(cls, None, args)


def test_the_same_keys_are_fine_where_they_are_used():
    assert load_config(SFTConfig, None, ["tiny.hidden=64"]).tiny.hidden == 64
    assert load_config(SFTConfig, None, ["finetune=lora", "lora.r=8", "optimizer=adamw"]).lora.r == 8
    assert load_config(GRPOConfig, None, ["beta=0.1", "kl_estimator=k3_ratio"]).kl_estimator == "k3_ratio"
    assert load_config(GRPOConfig, None, ["advantage=turn", "gamma=0.9"]).gamma == 0.9
    assert load_config(GRPOConfig, None, ["env_args.fault_rate=0.3"]).env_args == {"fault_rate": 0.3}


def test_overlay_sets_values_without_marking_them_as_the_users():
    cfg = load_config(SFTConfig, None, ["lr=1e-3"])
    copy = overlay(cfg, policy="runs/x/model", seed=4)
    assert (copy.policy, copy.seed, copy.lr) == ("runs/x/model", 4, 1e-3)
    assert copy.given("lr", "policy", "seed") == ["lr"] and copy.unused_keys() == []


def test_an_envs_or_a_models_run_defaults_are_not_the_users_keys():
    """codefix's run defaults set sft.epochs and a pretrained model's set sft.max_steps: neither is the user's."""
    from agentic_rl.pipeline import RunConfig, env_run_defaults

    for args, env in ((["sft.max_steps=5"], "codefix"), (["policy=smollm2-135m"], "codefix")):
        cfg = load_config(RunConfig, None, args, base=env_run_defaults(None, args, env), env=env)
        assert cfg.sft.given("epochs") == [] and cfg.sft.epochs == 2.0
    with pytest.raises(ConfigError, match="epochs: it is used only with max_steps=null"):  # both the user's: refused
        load_config(RunConfig, None, ["sft.epochs=1", "sft.max_steps=3"])


def test_doctor_refuses_policy_settings_without_a_policy_and_a_bad_env_value_is_one_line():
    from agentic_rl.commands import DoctorConfig

    with pytest.raises(ConfigError, match="group: it is used only with a policy"):
        load_config(DoctorConfig, None, ["group=8"])
    assert load_config(DoctorConfig, None, ["group=8", "policy=random"]).group == 8
    with pytest.raises(ConfigError, match=r"env_args.modules: input should be .*; env codefix takes modules: "
                                          r"list\[Module\] \| None$"):
        load_config(DoctorConfig, None, ["env=codefix", "env_args.modules=[1]"])
    with pytest.raises(ConfigError, match="max_new_tokens"):
        load_config(GRPOConfig, None, ["max_new_tokens=0"])
