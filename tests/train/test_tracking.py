import importlib.util

import pytest

from agentic_rl.config import ConfigError, load_config
from agentic_rl.train.sft import SFTConfig, train_sft

from ..conftest import SMALL_SFT

BASE = SMALL_SFT + ["demos=32", "max_steps=3", "eval_every=2", "eval_tasks=4", "batch_size=16"]


def test_tensorboard_gets_the_same_scalars_as_metrics_jsonl(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train_sft(load_config(SFTConfig, overrides=BASE + ["report_to=[tensorboard]"]), tmp_path / "run")
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loss", "lr", "grad_norm", "eval/success_rate"} <= set(tags)
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3]
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 3


def test_report_to_names_what_is_valid_and_what_to_install(tmp_path):
    with pytest.raises(ConfigError, match="tensorboard"):
        load_config(SFTConfig, overrides=BASE + ["report_to=[mlflow]"])
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match=r"pip install 'agentic-rl\[wandb\]'"):
            train_sft(load_config(SFTConfig, overrides=BASE + ["report_to=[wandb]"]), tmp_path / "w")
    else:  # offline mode: the run is recorded on disk and nothing leaves the machine
        train_sft(load_config(SFTConfig, overrides=BASE + ["report_to=[wandb]"]), tmp_path / "w")
        assert list((tmp_path / "w" / "wandb").glob("offline-run-*"))
