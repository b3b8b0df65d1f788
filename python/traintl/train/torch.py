"""traintl.train.torch: PyTorch data-parallel training, as ray.train.torch does it.

    from traintl import train

    def train_func(config):
        model = train.torch.prepare_model(MyNet())           # device + DistributedDataParallel
        loader = train.torch.prepare_data_loader(DataLoader(ds, batch_size=64, shuffle=True))
        for epoch in range(config["epochs"]):
            for x, y in loader:                              # this rank's part, on its device
                ...

Mirrors: prepare_model -> ray.train.torch.prepare_model, prepare_data_loader ->
ray.train.torch.prepare_data_loader, get_device -> ray.train.torch.get_device,
get_devices -> ray.train.torch.get_devices. The process group (gloo on CPU, nccl on GPU)
is set up from the job's context: by the worker before a {"python": ...} function runs
when its module imports torch (as Ray's TorchTrainer does), otherwise on first use of
prepare_model or prepare_data_loader.
"""

import datetime
import os
import socket
import threading
import time
from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.utils.data import (DataLoader, DistributedSampler, IterableDataset,
                              RandomSampler)

from traintl.train import _recovery, _session

__all__ = ["get_device", "get_devices", "prepare_data_loader", "prepare_model", "run_steps"]

_group_lock = threading.Lock()


def _context_int(key, default):
    value = _session.context().get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _use_gpu():
    return _session.context().get("use_gpu") is True and torch.cuda.is_available()


def _is_loopback(host):
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(
        info[4][0].startswith("127.") or info[4][0] == "::1" for info in infos)


def _interface_towards(host, port):
    """The name of the interface whose IPv4 address routes to host:port, as traintl::torch
    picks Gloo's device, or None (IPv6, no route, no such interface)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port or 9))  # no packet: only picks the route
            local = s.getsockname()[0]
    except OSError:
        return None
    import fcntl
    import struct
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(req[20:24]) == local:
                return name
    return None


def _wait_for_store(addr, port, timeout_s):
    """Waits until rank 0's TCPStore accepts connections. torch 1.13's client sleeps a
    whole second after a refused connect before it tries again, and a rank that imported
    torch a moment sooner than rank 0 would pay it on every start and restart (torchrun's
    workers never do: its agent hosts the store before they start)."""
    deadline = time.monotonic() + (timeout_s if timeout_s > 0 else 300)
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.005)
    # Past the deadline init_process_group reports the failure itself.


def _ensure_process_group():
    """Initializes torch.distributed's default process group from the job's context, as
    Ray's TorchTrainer does before the training function runs: backend nccl when the job
    uses GPUs, else gloo; rendezvous at master_addr:master_port (a single rank needs
    none); timeout collective_timeout_s. Does nothing when a group exists (set up by the
    worker, or by the program itself). Returns the default group."""
    with _group_lock:
        if dist.is_initialized():
            return dist.group.WORLD
        rank = _context_int("world_rank", 0)
        world_size = _context_int("world_size", 1)
        timeout_s = _context_int("collective_timeout_s", 0)
        kwargs = {"rank": rank, "world_size": world_size}
        if timeout_s > 0:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
        if _use_gpu():
            backend = "nccl"
            torch.cuda.set_device(get_device())
        elif _recovery.enabled():
            backend = "gloo"  # over a store that outlives a dead rank 0 (see _recovery)
        else:
            backend = _cpu_backend(world_size)
        master_addr = _session.context().get("master_addr") or "127.0.0.1"
        if world_size == 1:
            # Nothing to meet: no port to bind (as traintl::torch does).
            kwargs["store"] = dist.HashStore()
        else:
            master_port = _context_int("master_port", 0)
            if master_port <= 0:
                raise RuntimeError("the job's context has no master_port for the rendezvous")
            kwargs["init_method"] = f"tcp://{master_addr}:{master_port}"
            if rank != 0:
                _wait_for_store(master_addr, master_port, timeout_s)
        if backend in ("gloo", "traintl") and not os.environ.get("GLOO_SOCKET_IFNAME"):
            # Gloo otherwise binds to what the host name resolves to, which need not reach
            # a master on the loopback interface, nor the other nodes (Debian maps the host
            # name to 127.0.1.1): loopback for a single-host job, else the interface that
            # routes to the master, as traintl::torch does.
            loopback = [n for _, n in socket.if_nameindex() if n == "lo"]
            if world_size == 1 or _is_loopback(master_addr):
                if loopback:
                    os.environ["GLOO_SOCKET_IFNAME"] = loopback[0]
            else:
                ifname = _interface_towards(master_addr, _context_int("master_port", 0))
                if ifname:
                    os.environ["GLOO_SOCKET_IFNAME"] = ifname
        if _recovery.enabled():
            group_rank, group_size = _recovery.place()
            _recovery.init_group(group_rank, group_size, master_addr,
                                 _context_int("master_port", 0))
        else:
            dist.init_process_group(backend=backend, **kwargs)
        return dist.group.WORLD


def _cpu_backend(world_size):
    """The torch.distributed backend of a CPU job: "traintl" (traintl._c10d: shared memory
    among the ranks of a node, Gloo between one leader per node; see
    worker/torch/shm_group.h) when the job has several ranks, else (and with
    TRAINTL_SHM_COLLECTIVES=0, or without the module) "gloo". Every rank decides alike:
    the job's env and build are the same on every rank."""
    if world_size <= 1 or os.environ.get("TRAINTL_SHM_COLLECTIVES") == "0":
        return "gloo"
    try:
        from traintl import _c10d
    except ImportError as e:
        _session.native().log(2, f"traintl: no shared-memory collectives ({e}); using gloo")
        return "gloo"
    if "TRAINTL" not in dist.Backend._plugins:
        local_rank = _context_int("local_rank", 0)
        local_world_size = _context_int("local_world_size", 1)
        node_rank = _context_int("node_rank", 0)
        master_addr = _session.context().get("master_addr") or "127.0.0.1"

        # The backend marks its collectives in the rank's progress (stragglers, stalls),
        # unless progress is off.
        progress = None
        if os.environ.get("NO_TRAINTL_PROGRESS") != "1":
            progress = _session.native()._progress_hooks()

        def create(store, rank, size, timeout):
            return _c10d.create(store, rank, size, timeout, local_rank, local_world_size,
                                node_rank, world_size, master_addr, progress)

        dist.Backend.register_backend("traintl", create)
    return "traintl"


def get_device():
    """The torch.device this rank computes on: cuda:<local_rank mod visible GPUs> when the
    job uses GPUs, else cpu. Mirrors ray.train.torch.get_device()."""
    if _use_gpu():
        count = torch.cuda.device_count()
        return torch.device("cuda", _context_int("local_rank", 0) % max(count, 1))
    return torch.device("cpu")


def get_devices():
    """[get_device()]. Mirrors ray.train.torch.get_devices()."""
    return [get_device()]


def prepare_model(model, move_to_device=True, parallel_strategy="ddp",
                  parallel_strategy_kwargs=None):
    """Prepares a torch.nn.Module for data-parallel training: moves it to get_device()
    (or to `move_to_device` when that is a device) and, when the job has several ranks,
    wraps it in DistributedDataParallel (parallel_strategy "ddp"), FullyShardedDataParallel
    ("fsdp") or nothing (None). DDP's constructor broadcasts rank 0's parameters.
    Mirrors ray.train.torch.prepare_model().
    """
    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(
            f"parallel_strategy must be 'ddp', 'fsdp' or None, got {parallel_strategy!r}")
    _ensure_process_group()
    device = get_device()
    if isinstance(move_to_device, (torch.device, str)):
        device = torch.device(move_to_device)
        move_to_device = True
    if move_to_device:
        model = model.to(device)
    if dist.get_world_size() <= 1 or parallel_strategy is None:
        return model
    if _recovery.enabled() and parallel_strategy == "ddp":
        # Not DistributedDataParallel: its reducer cannot go on after a peer's death.
        return _recovery.prepare(model)
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, **kwargs)
    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device])
        kwargs.setdefault("output_device", device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if os.environ.get("NO_TRAINTL_PROGRESS") != "1":
        try:
            _report_progress(ddp)
        except Exception as e:  # a torch whose DDP differs: train without progress
            _session.native().log(2, f"traintl: no progress reports for this model: {e!r}")
    return ddp


def _report_progress(ddp):
    """Tells the head this rank's progress as the LibTorch integration does (steps, each
    step's time and the part not spent waiting for peers, the gradient synchronizations
    entered; see worker/sdk/include/traintl/progress_recorder.h), from the autograd
    engine's final callbacks, all on the thread that runs backward: when every gradient of
    a step is computed the rank begins to wait (DDP's own final callback, queued after
    ours, waits for the gradient allreduces), and a callback queued from there runs once
    that wait is over. No communication hook is registered (the user may register their
    own) and no Python runs on the process group's threads.
    """
    from torch.autograd import Variable

    native = _session.native()
    engine = Variable._execution_engine

    def step_synchronized():
        native._progress_wait(False)
        native._progress_step()

    def backward_computed():
        native._progress_collective()
        native._progress_wait(True)
        engine.queue_callback(step_synchronized)

    def at_backward_start(grad):
        engine.queue_callback(backward_computed)

    def after_forward(module, inputs, output):
        # Not for evaluation, nor for no_sync() steps, which synchronize nothing.
        if not torch.is_grad_enabled() or not getattr(module, "require_backward_grad_sync", True):
            return
        tensor = _first_tensor_requiring_grad(output)
        if tensor is not None:
            tensor.register_hook(at_backward_start)

    ddp.register_forward_hook(after_forward)


def _first_tensor_requiring_grad(output):
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values = output.values() if isinstance(output, Mapping) else (
        output if isinstance(output, (list, tuple)) else ())
    for v in values:
        found = _first_tensor_requiring_grad(v)
        if found is not None:
            return found
    return None


def prepare_data_loader(data_loader, add_dist_sampler=True, move_to_device=True,
                        auto_transfer=True):
    """Prepares a DataLoader for data-parallel training: when the job has several ranks,
    rebuilds it with a DistributedSampler (shuffling when the original used a
    RandomSampler) so that each rank reads its own part, keeping batch_size, num_workers,
    collate_fn, pin_memory, drop_last, timeout, worker_init_fn, ...; and returns a loader
    that moves every batch (tensors, nested in lists, tuples and dicts) to get_device()
    and advances the sampler's epoch on every new pass. Mirrors
    ray.train.torch.prepare_data_loader().
    """
    _ensure_process_group()
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    sampler_added = False
    if (add_dist_sampler and world_size > 1
            and not isinstance(data_loader.sampler, DistributedSampler)
            and not isinstance(data_loader.dataset, IterableDataset)
            and data_loader.batch_size is not None):
        data_loader = _with_distributed_sampler(data_loader, rank, world_size)
        sampler_added = True
    device = get_device() if move_to_device else None
    if isinstance(move_to_device, (torch.device, str)):
        device = torch.device(move_to_device)
    if device is None and not sampler_added:
        return data_loader
    return _WrappedDataLoader(data_loader, device, auto_transfer)


def _with_distributed_sampler(loader, rank, world_size):
    shuffle = isinstance(loader.sampler, RandomSampler)
    kwargs = {
        "dataset": loader.dataset,
        "batch_size": loader.batch_size,
        "shuffle": False,
        "sampler": DistributedSampler(loader.dataset, num_replicas=world_size, rank=rank,
                                      shuffle=shuffle),
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    pin_memory_device = getattr(loader, "pin_memory_device", "")
    if pin_memory_device:
        kwargs["pin_memory_device"] = pin_memory_device
    return DataLoader(**kwargs)


def _move_to_device(item, device, non_blocking=False):
    """`item` with every tensor in it (also inside lists, tuples, namedtuples and dicts)
    on `device`."""
    if device is None:
        return item
    if isinstance(item, torch.Tensor):
        return item.to(device, non_blocking=non_blocking) if item.device != device else item
    if isinstance(item, tuple) and hasattr(item, "_fields"):  # a namedtuple
        return type(item)(*(_move_to_device(v, device, non_blocking) for v in item))
    if isinstance(item, (list, tuple)):
        return type(item)(_move_to_device(v, device, non_blocking) for v in item)
    if isinstance(item, Mapping):
        moved = {k: _move_to_device(v, device, non_blocking) for k, v in item.items()}
        try:
            return type(item)(moved)
        except TypeError:
            return moved
    return item


class _WrappedDataLoader(DataLoader):
    """A DataLoader whose batches arrive on the rank's device and whose DistributedSampler
    gets set_epoch(n) before the n-th pass (0-based), as Ray's _WrappedDataLoader."""

    def __init__(self, base_dataloader, device, auto_transfer=True):
        # A DataLoader refuses to set some attributes after construction; take the base's
        # state as it is instead of constructing anew.
        self.__dict__.update(getattr(base_dataloader, "__dict__", {}))
        self.__dict__["_traintl_base"] = base_dataloader
        self.__dict__["_traintl_device"] = device
        self.__dict__["_traintl_non_blocking"] = bool(
            auto_transfer and device is not None and device.type == "cuda"
            and base_dataloader.pin_memory)
        self.__dict__["_traintl_epoch"] = 0

    def __len__(self):
        return len(self._traintl_base)

    def __iter__(self):
        sampler = self._traintl_base.sampler
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self._traintl_epoch)
        self.__dict__["_traintl_epoch"] = self._traintl_epoch + 1
        device = self._traintl_device
        non_blocking = self._traintl_non_blocking
        for batch in iter(self._traintl_base):
            yield _move_to_device(batch, device, non_blocking)


def run_steps(step, num_steps, first_step=0, model=None, optimizer=None, get_state=None,
              set_state=None):
    """Runs step(i) for i in range(first_step, num_steps) while the job is not asked to
    stop; returns the step it would run next.

    With run_config.failure_config.peer_recovery, a rank that dies costs no restart: the
    head starts a replacement, the surviving ranks' failed step waits for the head's word,
    the process group is rebuilt with the replacement, and every rank takes the state of
    the rank that completed the most steps (get_state() through torch.save, sent over the
    group; by default model's and optimizer's state_dict()) and goes on with the step after
    it. At most the step in progress is redone; with a step whose data depends only on
    (step, rank), the weights are bit-identical to a run without the death. A step must
    change the state only after its last collective (backward, then optimizer.step()) and
    start with zero_grad(). prepare_model does not wrap the module in
    DistributedDataParallel in such a job (its gradients are averaged by traintl's hooks,
    one allreduce per backward pass). Without peer recovery this is a plain loop.
    """
    return _recovery.run_steps(step, num_steps, first_step, model, optimizer, get_state,
                               set_state)
