"""Worker functions the executor tests share (module level: picklable by a process or Ray worker)."""

from __future__ import annotations

import os
import time


def _square_slowly(x: int) -> int:
    time.sleep(0.02 * (4 - x % 4))  # later items tend to finish first
    return x * x


def _worker_info(_: int) -> tuple[int, int, str | None, str | None]:
    import torch

    time.sleep(0.05)
    env = os.environ
    return os.getpid(), torch.get_num_threads(), env.get("OMP_NUM_THREADS"), env.get("CUDA_VISIBLE_DEVICES")

