"""tool_use, but the worker process that steps a chosen task dies there (os._exit), or hangs (`hang`): a lost
rollout worker, for tests/scale/test_ray_rollout.py. With `marker`, only the first process to get there is lost
(it leaves the file). `slow_s`: every start and step sleeps that long — a slow worker, not a hung one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentic_rl.envs.tool_use import ToolUseEnv


class DyingEnv(ToolUseEnv):
    def __init__(self, die_on: str = "", marker: str = "", hang: bool = False, slow_s: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.die_on, self.marker, self.hang, self.slow_s = die_on, marker, hang, slow_s

    def step(self, text):
        time.sleep(self.slow_s)
        return super().step(text)

    def start(self, task):
        time.sleep(self.slow_s)
        if task.id == self.die_on and not (self.marker and Path(self.marker).exists()):
            if self.marker:
                Path(self.marker).touch()
            if self.hang:
                time.sleep(3600)
            os._exit(1)
        super().start(task)
