"""One training run on N processes: data parallel (DDP) over a torch.distributed process group, launched
on a Ray cluster by Ray Train.

    Ranks(rank, size, device)            the trainer's gang (workers/train/trainer.py `Solo`) as collectives
    run_rank(spec, gang, artifact_dir, reporter)   one rank of a run (also without Ray: the tests' process
                                         groups); its outcome
    fit(spec, artifact_dir, workers, cpus, gpus, make_reporter)   the whole run as a Ray Train
                                         `TorchTrainer`; rank 0's outcome

What each rank computes: its share of every step, `split_step(counts, micro_batch_size, bucketing,
ranks=N)[rank]` (workers/train/batching.py: the rows, loop counts and h0 a one-process run with accumulation
uses, dealt so ranks do similar rows x rounds of work). Each forward's loss is scaled by its share of
the step's *global* target tokens, so the sum of every rank's gradient is the gradient of the step's
mean loss; DDP's all-reduce is made a sum (a comm hook; DDP itself would average over ranks). Only the
last micro-step reduces (DDP `no_sync` on the others, as nanoGPT's `require_backward_grad_sync`). So
1 x 8, 4 x 2 and 8 x 1 train the same model to float summation order, and a 2-rank run with one
forward per rank sums the same two partial gradients as one process with 2 micro-batches: bit for bit
on CPU at the same thread count (a + b is b + a in IEEE arithmetic).

Parameters a rank leaves unused in a step: a rank whose forwards all ran few rounds never touches a
parameter that only later rounds or gradient rounds use (the history maps of a step without past
states, the parameters of rounds run without autograd). DDP is built with `find_unused_parameters=True`:
on the syncing micro-step it walks that forward's autograd graph and marks what this rank did not use,
reducing its locally accumulated gradient (from earlier micro-steps) or zeros; a parameter no rank used
keeps `.grad` None, exactly as in one process. The walk visits the last forward's autograd graph once
per optimizer step (not per micro-step; DDP logs a warning once when a step happens to use every
parameter). Without it, a fixed loop count with truncated backprop already fails (tests/workers/
test_ddp.py was checked against that). The alternatives change the run or do not hold:
a zero contribution from every parameter (`0 * p.sum()`) gives unused parameters a zero gradient where
one process has None, and the optimizers then apply weight decay and decay their moments for them;
`static_graph` requires the same parameters used in every step, which sampled loop counts break.

Ray Train: `fit` builds a `TorchTrainer` with `ScalingConfig(num_workers=N, use_gpu=gpus > 0,
resources_per_worker={"CPU": cpus, "GPU": gpus})`, i.e. one placement group of N bundles, exactly the N
bundles the queue's admission booked (orchestrator/admission.py); backend NCCL on GPUs, gloo on CPUs.
Its failure handling is off (`max_failures=0`): the queue owns retries and resume, and a rank that dies
ends the attempt (`WorkerLost`). Each rank runs with `threads` torch threads (its bundle's CPUs).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from looplab.model.errors import ConfigError
from looplab.workers.reporter import JobInterrupted, Reporter, SilentReporter
from looplab.workers.train.spec import Spec, check_artifact_dir
from looplab.workers.train.trainer import Solo, Trainer

# Ray Train settings for the process that calls `fit`: workers keep the caller's working directory
# (relative data paths stay valid), and no preemption watcher or metrics actors (the queue resumes an
# interrupted run itself; each extra actor is a process to start).
RAY_TRAIN_ENV = {
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
}


START_TRIES = 10  # Ray Train's worker-group start timeouts (60 s each by default) before the attempt fails


class WorkerLost(Exception):
    """A rank's process (or its node) died: the attempt is interrupted, not failed by the job's code."""


def _sum_hook(group, bucket):  # no annotations: DDP compares them with its classes, not strings
    """DDP's reduction as a plain sum over ranks: each rank's gradient is already its share of the
    step's mean (DDP's default divides by the world size). (group, dist.GradBucket) -> a Future of the
    reduced bucket."""
    fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


class _Forward(nn.Module):
    """DDP wraps a module: this one holds the model (its parameters) and calls `forward` (its compiled
    parts, `LoopedLM.compile_parts`), which is not a module."""

    def __init__(self, model: nn.Module, forward: Callable[..., Any]) -> None:
        super().__init__()
        self.model = model
        self.__dict__["call"] = forward  # not a submodule: the model's parameters are registered once

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


class Ranks(Solo):
    """This process as rank `rank` of `size` in the default process group (already initialised: by
    Ray Train, or by a test), training on `device` (None: the spec's)."""

    def __init__(self, rank: int, size: int, device: torch.device | None = None) -> None:
        self.rank, self.size, self.device = rank, size, device
        self.backend = dist.get_backend()
        # where collectives' tensors live: NCCL reduces device tensors only
        self.comm = device if self.backend == "nccl" and device is not None else torch.device("cpu")

    def wrap(self, model: nn.Module, forward: Callable[..., Any]) -> DistributedDataParallel:
        module = model if forward is model else _Forward(model, forward)
        cuda = self.device is not None and self.device.type == "cuda"
        ddp = DistributedDataParallel(
            module,
            device_ids=[self.device] if cuda else None,
            find_unused_parameters=True,  # the module docstring: ranks leave different parameters unused
        )  # the model has no buffers (its RoPE tables are plain attributes): nothing to sync per forward
        ddp.register_comm_hook(None, _sum_hook)
        return ddp

    def sync(self, forward: DistributedDataParallel, last: bool):
        return contextlib.nullcontext() if last else forward.no_sync()

    def total(self, loss: torch.Tensor) -> torch.Tensor:
        loss = loss.clone()
        dist.all_reduce(loss)
        return loss

    def agree(self, value):
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.comm)
        dist.broadcast(t, src=0)
        return type(value)(t.item())

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out if self.rank == 0 else []


def check_workers(batch_size: int, workers: int) -> None:
    """A run on `workers` ranks needs a global batch they share evenly (workers/train/batching.py)."""
    if workers > 1 and batch_size % workers:
        raise ConfigError(
            f"resources.workers: {workers} workers cannot share batch_size {batch_size} evenly; "
            f"accepted: a divisor of the batch, e.g. {max(d for d in range(1, workers + 1) if batch_size % d == 0)}"
        )


def run_rank(spec: Spec, gang: Ranks, artifact_dir: Path, reporter: Reporter | None) -> dict[str, Any]:
    """Rank `gang.rank` of the run: `{"summary": train_results row}` (rank 0's is the run's) or
    `{"interrupted": message}` when the run was asked to stop (it checkpointed first). `reporter`:
    rank 0's (the others report nothing)."""
    if gang.rank == 0:
        check_artifact_dir(spec, artifact_dir)
    dist.barrier()  # spec.json checked (and written) before any rank reads the dir
    rep = reporter if gang.rank == 0 and reporter is not None else SilentReporter()
    try:
        return {"summary": Trainer(spec, rep, artifact_dir, gang).run()}
    except JobInterrupted as e:
        return {"interrupted": str(e)}


def train_worker(config: dict[str, Any]) -> dict[str, Any]:
    """Ray Train's function on each worker: this rank of the run `config` describes (see `fit`)."""
    import ray
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    torch.set_num_threads(config["threads"])
    spec = Spec.from_dict(config["spec"])
    device = None
    if config["use_gpu"] and spec.device in ("auto", "cuda"):
        device = ray.train.torch.get_device()  # this rank's GPU among those Ray gave the node's ranks
        torch.cuda.set_device(device)
    gang = Ranks(ctx.get_world_rank(), ctx.get_world_size(), device)
    reporter = config["make_reporter"]() if gang.rank == 0 else None
    name_group = getattr(reporter, "placement", None)
    if name_group is not None:  # the driver removes the group if it must stop a wedged gang itself
        name_group(ray.get_runtime_context().get_placement_group_id())
    try:
        return run_rank(spec, gang, Path(config["artifact_dir"]), reporter)
    finally:
        close = getattr(reporter, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fit(
    spec: dict[str, Any],
    artifact_dir: str | Path,
    workers: int,
    cpus: float,
    gpus: float,
    make_reporter: Callable[[], Reporter],
) -> dict[str, Any]:
    """Train `spec` (a canonical train spec dict) on `workers` Ray Train workers of `cpus` CPUs and
    `gpus` GPUs each; returns rank 0's outcome (`run_rank`). `make_reporter` (picklable: it travels to
    the workers) makes rank 0's reporter there. Raises `WorkerLost` when a rank's process died, the
    training error (with the failing ranks' tracebacks) otherwise."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.train.v2.api.exceptions import WorkerGroupError

    parsed = Spec.from_dict(spec)
    check_workers(parsed.batch_size, workers)
    artifact_dir = Path(artifact_dir)
    use_gpu = gpus > 0
    backend = "nccl" if use_gpu and parsed.device != "cpu" and dist.is_nccl_available() else "gloo"
    bundle = {"CPU": float(cpus), **({"GPU": float(gpus)} if use_gpu else {})}
    config = {
        "spec": spec,
        "artifact_dir": str(artifact_dir),
        "use_gpu": use_gpu,
        "threads": max(1, int(cpus)),
        "make_reporter": make_reporter,
    }
    with _environ(RAY_TRAIN_ENV):
        trainer = TorchTrainer(
            train_worker,
            train_loop_config=config,
            torch_config=TorchConfig(backend=backend),
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=bundle),
            run_config=RunConfig(
                name=f"attempt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                storage_path=str(artifact_dir / "ray_train"),
                # the queue retries; a placement group Ray cannot grant (the cluster used beside the
                # queue) fails the attempt after START_TRIES waits of Ray Train's start timeout
                failure_config=FailureConfig(
                    max_failures=0, max_preemption_failures=0, controller_failure_limit=START_TRIES
                ),
            ),
        )
        try:
            return trainer.fit().return_value
        except WorkerGroupError as e:
            died = {r: err for r, err in e.worker_failures.items() if _process_died(err)}
            if died:
                raise WorkerLost(
                    f"rank(s) {sorted(died)} of {workers} died: {next(iter(died.values()))}".splitlines()[0]
                ) from e
            raise


def _process_died(error: BaseException) -> bool:
    """Whether a rank's failure is its process gone (killed, its node lost), not an error it raised."""
    import ray.exceptions
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError

    return isinstance(error, ray.exceptions.RayActorError | WorkerHealthCheckFailedError)
