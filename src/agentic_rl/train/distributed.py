"""Data-parallel training: several processes started by `torchrun` or `accelerate launch`, one model copy each.

Every rank holds the whole batch's trajectories (the episodes of a step are sampled in shares and gathered, so each
rank sees what one process would), trains on its own share of the rows, and the gradients are summed across ranks
before the optimizer step. Every loss is normalised by the whole batch's counts, so the summed gradient is the one a
single process computes on the same batch, and every rank takes the same optimizer step. This is DDP's maths with
gradient accumulation under `no_sync`: one all-reduce per optimizer step. The reduce is explicit rather than torch's
`DistributedDataParallel` wrapper, whose hooks fire per backward pass of a forward through the wrapper, and a step
here runs the shared prompt prefix once and its backward after every micro-batch's (train/logprobs.py).

Rank 0 writes the run directory, metrics and checkpoints; the others wait for it. gloo on the CPU, NCCL on GPUs
(`cuda:LOCAL_RANK`). One process alone (no `WORLD_SIZE`) needs no process group: every method is then the identity.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch

from ..ui import console

T = TypeVar("T")

BUCKET = 1 << 24  # gradient elements per all-reduce (64 MiB in fp32)


class DataParallel:
    """This process's place among the training processes (`rank` of `world`)."""

    def __init__(self, rank: int = 0, world: int = 1, local_rank: int = 0):
        self.rank, self.world, self.local_rank = rank, world, local_rank

    @classmethod
    def start(cls, device: str) -> DataParallel:
        """Join the process group torchrun / accelerate describe in the environment (RANK, WORLD_SIZE, LOCAL_RANK,
        MASTER_ADDR, MASTER_PORT); a process started alone gets a world of one.

        Each rank takes an equal share of the machine's cores (several torch processes on all the cores slow each
        other down), and only rank 0 prints."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        import torch.distributed as dist

        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        gpu = device in ("auto", "cuda") and torch.cuda.is_available()
        if gpu:
            torch.cuda.set_device(local_rank)  # `cuda` is then this rank's GPU
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
        if not dist.is_initialized():  # a long evaluation on rank 0 keeps the others waiting at the next collective
            # NCCL for the gradients on the GPUs, gloo for the small CPU tensors (counts, checksums) beside them
            dist.init_process_group("cpu:gloo,cuda:nccl" if gpu else "gloo", timeout=timedelta(hours=2))
        if rank != 0:
            console.quiet = True
        return cls(rank, world, local_rank)

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the one that writes."""
        return self.rank == 0

    def describe(self) -> dict[str, Any]:
        """What the summary records of the processes that trained."""
        import torch.distributed as dist

        backend = dist.get_backend() if self.world > 1 else None
        return {"world_size": self.world, "backend": backend, "threads_per_rank": torch.get_num_threads(),
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous share of `items` (shares differ in size by at most one; a rank may get none)."""
        n, k = len(items), self.world
        lo, hi = self.rank * n // k, (self.rank + 1) * n // k
        return list(items[lo:hi])

    def rows(self, n: int) -> list[int]:
        """The rows of an n-row batch this rank trains on: every world-th, so each rank gets long and short ones."""
        return list(range(self.rank, n, self.world))

    def gather(self, items: list[T]) -> list[T]:
        """Every rank's `items`, concatenated in rank order, on every rank: shares from `shard` come back whole."""
        if self.world == 1:
            return items
        import torch.distributed as dist

        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, items)
        return [x for part in parts for x in part]

    def map_shards(self, fn: Callable[[list[T]], list[Any]], items: Sequence[T]) -> list[Any]:
        """`fn` over this rank's share of `items`, every rank's results gathered: the same list as `fn(items)` when
        fn treats each item on its own (episodes with their own random streams)."""
        mine = self.shard(items)
        return self.gather(fn(mine) if mine else [])

    def on_main(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on rank 0 alone, its result given to every rank, or its error raised on every rank (a refusal
        on rank 0 must not leave the others waiting)."""
        if self.world == 1:
            return fn(*args)
        import torch.distributed as dist

        box: list[Any] = [None]
        if self.main:
            try:
                box = [(fn(*args), None)]
            except Exception as e:  # re-raised on every rank below
                box = [(None, e)]
        dist.broadcast_object_list(box, src=0)
        result, error = box[0]
        if error is not None:
            raise error
        return result

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each value summed over the ranks (the statistics each rank gathered on its own rows)."""
        if self.world == 1:
            return values
        import torch.distributed as dist

        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        dist.all_reduce(t)
        return dict(zip(keys, t.tolist()))

    def reduce_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum every trainable parameter's gradient over the ranks, in buckets; a rank that left a gradient empty
        (no rows this step) sends zeros. A parameter no rank has a gradient for keeps none, as in one process (the
        optimizer skips it)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        params = [p for p in params if p.requires_grad]
        has = torch.tensor([float(p.grad is not None) for p in params], dtype=torch.float64)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)
        params = [p for p, h in zip(params, has.tolist()) if h]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.Tensor] = []
        for i, p in enumerate(params):
            bucket.append(p.grad)
            if sum(g.numel() for g in bucket) >= BUCKET or i == len(params) - 1 or params[i + 1].grad.dtype != p.grad.dtype:
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat)
                offset = 0
                for g in bucket:
                    g.copy_(flat[offset:offset + g.numel()].view_as(g))
                    offset += g.numel()
                bucket = []

    def check_in_sync(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Raise if the ranks' weights have drifted apart (they take the same steps, so they must not)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        total = torch.tensor([sum(float(p.detach().double().sum()) for p in params)], dtype=torch.float64)
        lo, hi = total.clone(), total.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        if float(hi - lo) > 1e-6 * max(1.0, abs(float(total))):
            raise RuntimeError(f"the training processes' weights differ (sums {float(lo):.9g} … {float(hi):.9g}): "
                               "every rank must take the same optimizer step")

    def close(self) -> None:
        """Leave the process group (the launcher starts one per run)."""
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def launched_by_torchrun() -> bool:
    """Whether this process is one of several a launcher started (torchrun and accelerate set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1
