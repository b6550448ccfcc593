"""Training past one device: process groups, DDP and FSDP2, global batches, and checkpoints that
load on any number of processes. The command line over it is :mod:`seqbook.gpt_train`.

The design in five rules:

1. **One process per device**, started by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``,
   ``LOCAL_RANK`` and the rendezvous address); :func:`init_distributed` joins the group with gloo on
   CPUs and NCCL on GPUs. A process started without ``torchrun`` trains alone, with no group.
2. **The data order depends on (seed, step) only.** :func:`global_batch_starts` draws the B window
   starts of a whole optimiser step from a generator seeded by the pair; rank r of W takes the
   r-th contiguous slice of B / W, and cuts it into ``accumulate`` micro-batches. Any number of
   processes, with any accumulation, sees the same global batch at every step, so a run is the
   same run wherever it is resumed.
3. **One loss, one gradient.** Every micro-batch loss is a mean over the same number of tokens;
   dividing it by ``accumulate`` and letting DDP or FSDP2 average the gradients over the W ranks
   gives the gradient of the global batch's mean loss. Gradients are clipped by their global norm
   (:func:`torch.nn.utils.clip_grad_norm_` computes it over the shards of FSDP2's DTensors).
4. **Checkpoints are full and pickle-free.** The unsharded model and optimiser state (gathered with
   ``torch.distributed.checkpoint.state_dict``) go into one ``safetensors`` file, everything else
   into a JSON file beside it (format and version, step, settings, the SHA-256 of the tensor file);
   both are written by rank 0 into a temporary folder that is renamed at the end. Loading never runs
   code from the files: rank 0 checks the JSON, the checksum and every shape first, then the state
   is copied into the model (sharded as the current run needs) and broadcast from rank 0.
5. **Random states** of every rank (CPU, and CUDA when present) are saved; they are restored when
   the run resumes on as many processes, and reseeded from (seed, rank, step) otherwise (they only
   matter for dropout).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from .checks import (
    INTEGER_DTYPES,
    check_count,
    check_flag,
    check_ids,
    check_int,
    check_number,
    check_positive_int,
    check_tensor,
    checked,
    optional,
    readers_code,
)
from .gpt import GPT, GPTConfig
from .train import warmup_factor

__all__ = [
    "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "LOG_FORMAT", "LOG_VERSION", "PARALLEL",
    "CheckpointError", "CheckpointDamaged", "Dist", "RunSettings", "init_distributed", "shutdown_distributed",
    "launched_world_size", "wrap_model", "global_batch_starts", "windows", "save_checkpoint",
    "load_checkpoint", "checkpoint_folders", "latest_checkpoint", "train_distributed",
]

CHECKPOINT_FORMAT = "seqbook.gpt_train checkpoint"
CHECKPOINT_VERSION = 1
LOG_FORMAT = "seqbook.gpt_train log"
LOG_VERSION = 1
PARALLEL = ("ddp", "fsdp")
SCHEDULES = ("cosine", "linear", "constant", "inverse_sqrt")  # warmup_factor's kinds
TENSOR_FILE = "tensors.safetensors"
STATE_FILE = "state.json"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: missing, truncated, corrupted, foreign, or of another run.
    The message names the file and what differs."""


class CheckpointDamaged(CheckpointError):
    """A checkpoint folder that is gone, or whose files are missing, unreadable or fail their
    checksum, or whose ``state.json`` names another step than its folder (not one of another run
    or format: an older checkpoint of the same run may serve)."""


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


@dataclass
class Dist:
    """Where this process stands: its rank among ``world_size``, its device and the backend
    (None when it trains alone, without a process group)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None
    owns_group: bool = False  # this process joined the group in init_distributed (and leaves it)

    def __post_init__(self):
        check_int("world_size", self.world_size)
        check_int("rank", self.rank, minimum=0, maximum=self.world_size - 1)
        check_int("local_rank", self.local_rank, minimum=0)

    @property
    def grouped(self) -> bool:
        return self.backend is not None

    @property
    def main(self) -> bool:
        return self.rank == 0


def launched_world_size() -> int:
    """The number of processes ``torchrun`` started (1 without it), read before joining the group."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_distributed(device: str = "auto") -> Dist:
    """Join the process group that ``torchrun`` set up, if any: gloo on CPUs, NCCL on GPUs.

    ``device`` is ``"auto"`` (a GPU when there is one), ``"cpu"`` or ``"cuda"``. Under ``torchrun``
    each process takes the GPU ``LOCAL_RANK`` of its machine. A group that is already set up (by
    the caller, to run several trainings in one launch) is used as it is.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no GPU")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if "RANK" not in os.environ:  # started without torchrun: alone
        return Dist(device=dev)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if use_cuda else "gloo", device_id=dev if use_cuda else None)
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, dev, dist.get_backend(), owns)


def shutdown_distributed(d: Dist) -> None:
    """Leave the process group if :func:`init_distributed` joined it (a group the caller set up
    before, to run several trainings in one launch, stays)."""
    if d.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: nn.Module, parallel: str, d: Dist) -> nn.Module:
    """The model as the ranks train it: itself when alone; ``DistributedDataParallel`` (every rank a
    full copy, gradients all-reduced); or FSDP2 (``fully_shard`` on every block of ``model.blocks``,
    then on the root, so each rank keeps 1/W of every parameter and gathers a block just before it
    runs)."""
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    if not d.grouped:
        return model
    if parallel == "ddp":
        ids = [d.device.index] if d.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    return fully_shard(model)


def _all_mean(value: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.grouped:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value = value / d.world_size
    return value


# ---------------------------------------------------------------------------------------------
# Data: the global batch of a step depends on (seed, step) only
# ---------------------------------------------------------------------------------------------


def _mixed_seed(*numbers: int) -> int:
    """A 256-bit seed from ``numbers`` (SHA-256). NumPy's generators take all of it; torch's CPU
    generator would keep only 32 bits, and two (seed, step) pairs would then share a batch about
    once in 2^32 pairs."""
    digest = hashlib.sha256(":".join(str(n) for n in numbers).encode()).digest()
    return int.from_bytes(digest, "little")


def _torch_seed(*numbers: int) -> int:
    """:func:`_mixed_seed` cut to 63 bits, a non-negative int64 (``torch.manual_seed`` takes up to
    64; its CPU generator uses only the low 32)."""
    return _mixed_seed(*numbers) >> 193


def _check_global_batch_starts(num_tokens, block_size) -> None:
    if num_tokens - block_size < 1:  # a window starts at s and its targets end at s + block_size
        raise ValueError(f"num_tokens must be >= block_size + 1 = {block_size + 1} (a window and its "
                         f"targets), got {num_tokens}: the text is too short for windows of {block_size}")


@checked(_check_global_batch_starts, seed=partial(check_int, minimum=None),
         step=check_count, num_tokens=check_positive_int, block_size=check_positive_int,
         batch_size=check_positive_int)
def global_batch_starts(seed: int, step: int, num_tokens: int, block_size: int, batch_size: int
                        ) -> torch.Tensor:
    """The start positions (batch_size,) of the training windows of optimiser step ``step``.

    Drawn uniformly from [0, num_tokens - block_size - 1] (each window and its targets, shifted by
    one, fit in the text) by a generator seeded with (seed, step): the same for any number of
    processes and any accumulation, and the same after a resume.
    """
    high = num_tokens - block_size  # a window starts at s and its targets end at s + block_size
    rng = np.random.default_rng(_mixed_seed(seed, step))
    return torch.from_numpy(rng.integers(0, high, size=batch_size, dtype=np.int64))


def _check_windows(ids, starts, block_size) -> None:
    if ids.dtype not in INTEGER_DTYPES:
        raise TypeError(f"ids must be an integer tensor (token ids), got {ids.dtype}")
    if ids.numel() <= block_size:
        raise ValueError(f"ids must hold more than block_size = {block_size} tokens (a window and its "
                         f"targets), got {ids.numel()}")
    check_ids("starts", starts, ids.numel() - block_size, ndim=1, names="(B,)", nonempty=False)


@checked(_check_windows, ids=partial(check_tensor, ndim=1, names="(N,)"), block_size=check_positive_int)
def windows(ids: torch.Tensor, starts: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets (B, T) of the windows of ``ids`` that begin at ``starts``."""
    rows = ids.unfold(0, block_size + 1, 1)[starts]  # (B, T + 1)
    return rows[:, :-1], rows[:, 1:]


# ---------------------------------------------------------------------------------------------
# Checkpoints: safetensors + JSON, full state, written by rank 0, loaded on any world size
# ---------------------------------------------------------------------------------------------


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries where the system allows) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a folder cannot be opened on some systems: nothing to flush there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dedupe(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors safetensors can write: contiguous, on the CPU, no two sharing memory (tied weights)."""
    seen, out = set(), {}
    for k, v in tensors.items():
        v = v.detach().to("cpu").contiguous()
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape))
        out[k] = v.clone() if key in seen else v
        seen.add(key)
    return out


def _state_dict_options(d: Dist, broadcast: bool = False):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=d.grouped,
                            broadcast_from_rank0=broadcast and d.grouped)


def _rng_states(d: Dist) -> list[dict[str, torch.Tensor]]:
    """Every rank's random states, gathered on all ranks (a short list of small byte tensors)."""
    mine = {"cpu": torch.get_rng_state()}
    if d.device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(d.device)
    if not d.grouped:
        return [mine]
    gathered: list = [None] * d.world_size
    dist.all_gather_object(gathered, mine)
    return gathered


def save_checkpoint(directory: str | os.PathLike, step: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer, d: Dist, state: dict, keep: int = 0) -> Path | None:
    """Write the checkpoint of ``step`` as ``directory/step_00000042/{tensors.safetensors,
    state.json}``; every rank must call it (gathering the shards is collective), rank 0 writes.

    ``state`` holds what is not a tensor (settings, data description, history); the JSON adds the
    format, version, step, world size and the tensor file's SHA-256. The files are written into a
    temporary folder that is renamed once complete. ``keep`` > 0 deletes all but the newest ``keep``
    checkpoints. Returns the folder (on rank 0; None elsewhere).
    """
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    options = _state_dict_options(d)
    model_sd = get_model_state_dict(model, options=options)
    optim_sd = get_optimizer_state_dict(model, optimizer, options=options)
    rng = _rng_states(d)
    final = None
    if d.main:
        tensors = {f"model/{k}": v for k, v in model_sd.items()}
        per_param = {}
        for fqn, entry in optim_sd["state"].items():
            per_param[fqn] = {}
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"optim/{fqn}/{key}"] = value
                else:
                    per_param[fqn][key] = value
        for r, states in enumerate(rng):
            for kind, value in states.items():
                tensors[f"rng/{r}/{kind}"] = value
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step_{step:08d}"
        tmp = root / f".tmp_step_{step:08d}_{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file(_dedupe(tensors), str(tmp / TENSOR_FILE))
        _fsync(tmp / TENSOR_FILE)  # on the disk before the folder is renamed into place
        meta = {
            "format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": step,
            "world_size": d.world_size,
            "tensor_file": TENSOR_FILE, "tensor_sha256": _sha256(tmp / TENSOR_FILE),
            "model_shapes": {k: list(v.shape) for k, v in model_sd.items()},
            "optimizer_param_groups": optim_sd["param_groups"],
            "optimizer_scalars": {k: v for k, v in per_param.items() if v},
            **state,
        }
        with open(tmp / STATE_FILE, "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync(tmp)  # the folder's entries
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync(root)  # the rename itself
        if keep > 0:
            for old in _checkpoints(root)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    if d.grouped:
        dist.barrier()
    return final


def _checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name))


def checkpoint_folders(directory: str | os.PathLike) -> list[Path]:
    """The checkpoint folders in ``directory`` (``step_00000042``), oldest first."""
    return _checkpoints(Path(directory))


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder in ``directory`` (None when there is none)."""
    found = checkpoint_folders(directory)
    return found[-1] if found else None


def _differences(name: str, saved: dict, current: dict) -> list[str]:
    return [f"{name}.{k}: checkpoint {saved.get(k)!r}, this run {current.get(k)!r}"
            for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]


def _read_checkpoint(path: Path, expect: dict, shapes: dict[str, list[int]]) -> tuple[dict, dict]:
    """Check everything before anything is restored; returns (meta, tensors) or raises
    :class:`CheckpointError` naming the file and what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state_file, tensor_file = path / STATE_FILE, path / TENSOR_FILE
    if not path.is_dir():
        raise CheckpointDamaged(f"{path}: no such checkpoint folder")
    for f in (state_file, tensor_file):
        if not f.is_file():
            raise CheckpointDamaged(f"{f}: missing; {path} is not a complete checkpoint")
    try:
        meta = json.loads(state_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointDamaged(f"{state_file}: not a checkpoint's JSON (truncated or foreign): {exc}"
                                ) from None
    except OSError as exc:  # a read that fails (a bad sector, a vanished file)
        raise CheckpointDamaged(f"{state_file}: unreadable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{state_file}: not a {CHECKPOINT_FORMAT!r} file (format {got!r})")
    if meta.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{state_file}: format version {meta.get('version')!r}, this code reads "
                              f"version {CHECKPOINT_VERSION}")
    try:
        digest = _sha256(tensor_file)
    except OSError as exc:
        raise CheckpointDamaged(f"{tensor_file}: unreadable: {exc}") from None
    if digest != meta.get("tensor_sha256"):
        raise CheckpointDamaged(f"{tensor_file}: SHA-256 {digest} differs from the "
                                f"{meta.get('tensor_sha256')} recorded in {state_file}: the file is "
                                "truncated, corrupted or replaced")
    wrong = []
    for key in ("config", "run", "data"):
        wrong += _differences(key, meta.get(key) or {}, expect[key])
    if wrong:
        raise CheckpointError(f"{path} belongs to another run: " + "; ".join(wrong))
    named = _STEP_DIR.match(path.name)
    if named and meta.get("step") != int(named.group(1)):
        raise CheckpointDamaged(f"{state_file}: step {meta.get('step')!r} differs from the folder's "
                                f"{int(named.group(1))}: the file is corrupted or replaced")
    if meta.get("model_shapes") != shapes:
        saved = meta.get("model_shapes") or {}
        diff = [f"{k}: checkpoint {saved.get(k)}, this model {shapes.get(k)}"
                for k in sorted(set(saved) | set(shapes)) if saved.get(k) != shapes.get(k)]
        raise CheckpointError(f"{path}: the model's tensors differ: " + "; ".join(diff[:8]))
    try:
        tensors = load_file(str(tensor_file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointDamaged(f"{tensor_file}: unreadable safetensors file: {exc}") from None
    for k, shape in shapes.items():
        t = tensors.get(f"model/{k}")
        if t is None or list(t.shape) != shape:
            got = None if t is None else list(t.shape)
            raise CheckpointError(f"{tensor_file}: tensor model/{k} is {got}, the model needs {shape}")
    return meta, tensors


def _set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint folder so that no later resume or ``keep`` counts it."""
    target = path.with_name(f"damaged_{path.name}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"damaged_{path.name}_{n}")
    os.replace(path, target)
    return target


def load_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                    d: Dist, expect: dict, shapes: dict[str, list[int]],
                    fallback: Sequence[str | os.PathLike] = ()) -> dict:
    """Restore ``model`` and ``optimizer`` (wrapped or not, on any number of processes) from the
    checkpoint folder ``path``; every rank calls it. Rank 0 reads and checks the files (only its
    machine needs them) and the state is broadcast from it; an error is raised on every rank, before
    anything is restored. Returns the JSON state (the random states restored when the world size
    matches). ``expect`` holds the run's ``config``, ``run`` and ``data`` dicts, which must match the
    checkpoint's; ``shapes`` the model's full tensor shapes.

    ``fallback`` lists older checkpoint folders of the run, newest first, tried in turn when
    ``path`` is damaged (:class:`CheckpointDamaged`: a file missing, unreadable or failing its
    checksum, or a ``state.json`` naming another step than its folder); a checkpoint of another
    run or format still stops the resume. When an older one is restored, the damaged folders
    passed over are renamed ``damaged_step_...`` (so that no later resume and no ``keep`` counts
    them; one that cannot be renamed stays, and is overwritten if the run saves that step again)
    and the returned state's ``skipped`` says why each was.
    """
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    path = Path(path)
    meta, tensors, error = None, {}, None
    if d.main:
        damaged: list[tuple[Path, str]] = []
        for candidate in [path, *map(Path, fallback)]:
            try:
                meta, tensors = _read_checkpoint(candidate, expect, shapes)
            except CheckpointDamaged as exc:
                damaged.append((candidate, str(exc)))
                continue
            except CheckpointError as exc:
                error = str(exc)
            break
        if meta is None:
            reasons = [why for _, why in damaged] + ([] if error is None else [error])
            error = (reasons[0] if len(reasons) == 1
                     else "no checkpoint could be restored: " + "; then ".join(reasons))
        else:
            meta["path"] = str(candidate)  # the other ranks may not see the folder
            meta["skipped"] = []
            for folder, why in damaged:
                if folder.is_dir() and _STEP_DIR.match(folder.name):  # only checkpoint folders
                    try:
                        why += f" (moved to {_set_aside(folder).name})"
                    except OSError as exc:
                        why += f" (could not be moved aside: {exc})"
                meta["skipped"].append(why)
                print(f"resume: {why}; resuming from {candidate}", file=sys.stderr)
    if d.grouped:
        box = [(error, meta)]
        dist.broadcast_object_list(box, src=0)
        error, meta = box[0]
    if error is not None:
        raise CheckpointError(error)
    model_sd, optim_sd, rng = {}, {}, {}
    if d.main:
        optim_state: dict[str, dict] = {}
        for k, v in tensors.items():
            kind, _, rest = k.partition("/")
            if kind == "model":
                model_sd[rest] = v
            elif kind == "optim":
                fqn, _, key = rest.rpartition("/")
                optim_state.setdefault(fqn, {})[key] = v
            elif kind == "rng":
                r, _, what = rest.partition("/")
                rng.setdefault(int(r), {})[what] = v
        for fqn, scalars in meta.get("optimizer_scalars", {}).items():
            optim_state.setdefault(fqn, {}).update(scalars)
        optim_sd = {"state": optim_state, "param_groups": meta["optimizer_param_groups"]}
    options = _state_dict_options(d, broadcast=True)
    set_model_state_dict(model, model_sd, options=options)
    set_optimizer_state_dict(model, optimizer, optim_sd, options=options)
    same_world = meta["world_size"] == d.world_size
    if d.grouped:  # each rank needs its own random states
        box = [rng if d.main else None]
        dist.broadcast_object_list(box, src=0)
        rng = box[0]
    if same_world and d.rank in rng:
        torch.set_rng_state(rng[d.rank]["cpu"])
        if d.device.type == "cuda" and "cuda" in rng[d.rank]:
            torch.cuda.set_rng_state(rng[d.rank]["cuda"], d.device)
    else:
        torch.manual_seed(_torch_seed(meta["run"]["seed"], d.rank, meta["step"], "rng"))
    meta["rng_restored"] = same_world
    return meta


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------


@dataclass
class RunSettings:
    """What defines a run (a checkpoint resumes only a run with the same settings); the number of
    processes, the parallel mode and the accumulation may change between resumes."""

    steps: int
    batch_size: int  # global: sequences per optimiser step, over all processes
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 0
    schedule: str = "cosine"  # warmup_factor's kind: cosine, linear, constant or inverse_sqrt
    min_lr_factor: float = 0.1
    clip: float = 1.0  # 0: no clipping
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self):
        check_positive_int("steps", self.steps)
        check_positive_int("batch_size", self.batch_size)
        check_number("lr", self.lr, low=0.0)
        check_number("weight_decay", self.weight_decay, low=0.0)
        check_int("warmup", self.warmup, minimum=0)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_number("min_lr_factor", self.min_lr_factor, 0.0, 1.0)
        check_number("clip", self.clip, low=0.0)
        check_int("seed", self.seed, minimum=None)
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")


def _param_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64}[name]


def _evaluate(model: nn.Module, ids: torch.Tensor, block_size: int, num_windows: int, d: Dist,
              autocast) -> float | None:
    """Mean loss over ``num_windows`` evenly spaced windows of ``ids`` (split over the ranks)."""
    high = ids.numel() - block_size
    per_rank = num_windows // d.world_size
    if high < 1 or per_rank < 1:
        return None
    starts = torch.linspace(0, high - 1, per_rank * d.world_size).long()
    mine = starts[d.rank * per_rank:(d.rank + 1) * per_rank]
    x, y = windows(ids, mine, block_size)
    model.eval()
    with torch.no_grad(), autocast():
        _, loss = model(x.to(d.device), y.to(d.device))
    model.train()
    return float(_all_mean(loss.detach().double(), d))


def _check_train_distributed(config, train_ids, valid_ids, run, d, parallel, accumulate, bf16,
                              resume_fallback, on_log) -> None:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a seqbook.gpt.GPTConfig, got {type(config).__name__}")
    check_ids("train_ids", train_ids, config.vocab_size, ndim=1, names="(N,)")
    if valid_ids is not None:
        check_ids("valid_ids", valid_ids, config.vocab_size, ndim=1, names="(N,)", nonempty=False)
    if not isinstance(run, RunSettings):
        raise TypeError(f"run must be a RunSettings, got {type(run).__name__}")
    if not isinstance(d, Dist):
        raise TypeError(f"d must be a Dist (see init_distributed), got {type(d).__name__}")
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    if run.batch_size % (d.world_size * accumulate):
        raise ValueError(f"batch_size {run.batch_size} must be divisible by processes x accumulate = "
                         f"{d.world_size} x {accumulate}")
    if on_log is not None and not callable(on_log):
        raise TypeError(f"on_log must be callable or None, got {type(on_log).__name__}")
    if not isinstance(resume_fallback, list | tuple) or not all(
            isinstance(p, str | os.PathLike) for p in resume_fallback):
        raise TypeError("resume_fallback must be a list or tuple of checkpoint folders (str or "
                        f"Path), got {resume_fallback!r}")
    if bf16 and d.device.type != "cuda":
        raise ValueError("bf16=True needs a CUDA device (bfloat16 autocast runs only on the GPU "
                         f"here), got d.device {d.device}")


@checked(_check_train_distributed, accumulate=check_positive_int, bf16=check_flag,
         checkpoint_every=check_count, keep=check_count,
         stop_after=optional(check_positive_int), eval_every=check_count,
         eval_windows=check_positive_int, progress=check_flag)
def train_distributed(
    config: GPTConfig,
    train_ids: torch.Tensor,
    valid_ids: torch.Tensor | None,
    run: RunSettings,
    d: Dist,
    data_info: dict,
    *,
    parallel: str = "ddp",
    accumulate: int = 1,
    bf16: bool = False,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 0,
    keep: int = 0,
    resume: str | os.PathLike | None = None,
    resume_fallback: Sequence[str | os.PathLike] = (),
    stop_after: int | None = None,
    eval_every: int = 0,
    eval_windows: int = 64,
    progress: bool = True,
    log_extra: dict | None = None,
    on_log: Callable[[dict], None] | None = None,
) -> dict:
    """Train a :class:`GPT` of ``config`` on ``train_ids`` with AdamW on every process of ``d`` and
    return the log (a dict, the same on every rank; see :mod:`seqbook.gpt_train` for its fields).

    Each optimiser step takes ``run.batch_size`` windows (:func:`global_batch_starts`), this rank's
    contiguous share of them in ``accumulate`` micro-batches; the learning rate follows
    ``lr * warmup_factor(step - 1, warmup, steps, schedule, min_lr_factor)``; gradients are clipped
    to global norm ``run.clip``. A checkpoint is written every ``checkpoint_every`` steps and at the
    end (when ``checkpoint_dir`` is set); ``resume`` continues from a checkpoint folder, or from
    the first undamaged one of ``resume_fallback`` (older folders, newest first; see
    :func:`load_checkpoint`) when it is damaged; ``stop_after`` ends the run early at that step
    (after its checkpoint), as a preempted job would. ``on_log(log)`` is called on rank 0 after
    every checkpoint and at the end.

    Every argument is checked before anything runs, the token ids against ``config.vocab_size``
    (one read of their values); the functions it calls do not check again.
    """
    W, K, B = d.world_size, accumulate, run.batch_size
    micro = B // (W * K)
    dtype = _param_dtype(run.dtype)
    torch.manual_seed(run.seed)  # the same initial weights on every rank
    model = GPT(config).to(device=d.device, dtype=dtype)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    parameters = sum(p.numel() for p in model.parameters())
    model = wrap_model(model, parallel, d)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.lr, weight_decay=run.weight_decay)
    torch.manual_seed(_torch_seed(run.seed, d.rank, 0, "rng"))  # dropout: a stream per rank
    expect = {"config": asdict(config), "run": asdict(run), "data": data_info}
    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "eval_step": [], "eval_loss": []}
    start_step, resumed = 0, None
    if resume is not None:
        meta = load_checkpoint(resume, model, optimizer, d, expect, shapes, resume_fallback)
        start_step = meta["step"]
        history = meta["history"]
        resumed = {"path": meta["path"], "step": start_step, "world_size": meta["world_size"],
                   "parallel": meta.get("parallel"), "rng_restored": meta["rng_restored"],
                   "skipped": meta["skipped"]}
    last = run.steps if stop_after is None else min(run.steps, stop_after)
    if d.device.type == "cuda":
        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)
    else:
        autocast = nullcontext
    ids = train_ids
    checkpoints: list[str] = []
    log = {
        "format": LOG_FORMAT, "version": LOG_VERSION, **(log_extra or {}),
        "world_size": W, "parallel": parallel if d.grouped else "none", "backend": d.backend,
        "device": d.device.type, "dtype": run.dtype, "bf16": bf16,
        "config": asdict(config), "parameters": parameters, "data": data_info, **asdict(run),
        "accumulate": K, "micro_batch_size": micro, "tokens_per_step": B * config.block_size,
        "resumed_from": resumed, "stopped_at": None, "checkpoints": checkpoints,
    }

    def snapshot() -> dict:
        return {**log, **history,
                "final_loss": history["loss"][-1] if history["loss"] else None,
                "final_eval_loss": history["eval_loss"][-1] if history["eval_loss"] else None}

    def checkpoint(step: int) -> None:
        state = {**expect, "history": history, "parallel": parallel if d.grouped else "none",
                 "schedule_state": {"kind": run.schedule, "warmup": run.warmup, "total_steps": run.steps,
                                    "min_factor": run.min_lr_factor, "step": step},
                 "data_position": {"step": step, "rule": "windows of step s drawn from (seed, s)"}}
        path = save_checkpoint(checkpoint_dir, step, model, optimizer, d, state, keep)
        if d.main:
            checkpoints.append(str(path))
            if on_log is not None:
                with readers_code():  # the reader's function: its calls into seqbook are checked
                    on_log(snapshot())

    disable = not progress or not d.main or bool(os.environ.get("TQDM_DISABLE"))
    bar = tqdm(range(start_step + 1, last + 1), desc="gpt_train", disable=disable, leave=False)
    started = time.perf_counter()
    model.train()
    for step in bar:
        lr = run.lr * warmup_factor(step - 1, run.warmup, run.steps if run.schedule in ("cosine", "linear")
                                    else None, run.schedule, run.min_lr_factor)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = global_batch_starts(run.seed, step, ids.numel(), config.block_size, B)
        mine = starts[d.rank * K * micro:(d.rank + 1) * K * micro]
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64, device=d.device)
        for k in range(K):
            x, y = windows(ids, mine[k * micro:(k + 1) * micro], config.block_size)
            sync = k == K - 1
            if d.grouped and parallel == "ddp":
                context = model.no_sync() if not sync else nullcontext()
            else:
                if d.grouped:
                    model.set_requires_gradient_sync(sync)
                context = nullcontext()
            with context:
                with autocast():
                    _, loss = model(x.to(d.device), y.to(d.device))
                (loss / K).backward()
            total += loss.detach().double()
        norm = nn.utils.clip_grad_norm_(model.parameters(), run.clip if run.clip > 0 else math.inf)
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor
            norm = norm.full_tensor()
        optimizer.step()
        mean_loss = float(_all_mean(total / K, d))
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"the loss became {mean_loss} at step {step}")
        history["step"].append(step)
        history["loss"].append(mean_loss)
        history["lr"].append(lr)
        history["grad_norm"].append(float(norm))
        if valid_ids is not None and (step == run.steps or (eval_every and step % eval_every == 0)):
            value = _evaluate(model, valid_ids, config.block_size, eval_windows, d, autocast)
            if value is not None:
                history["eval_step"].append(step)
                history["eval_loss"].append(value)
        bar.set_postfix(loss=f"{mean_loss:.3f}")
        due = step == last or (checkpoint_every and step % checkpoint_every == 0)
        if checkpoint_dir is not None and due:
            checkpoint(step)
    bar.close()
    seconds = time.perf_counter() - started
    done = last - start_step
    log["stopped_at"] = last if last < run.steps else None
    log["seconds"] = round(seconds, 3)
    log["tokens_per_second"] = round(done * B * config.block_size / seconds, 1) if done and seconds else None
    result = snapshot()
    if d.main and on_log is not None:
        with readers_code():
            on_log(result)
    return result
