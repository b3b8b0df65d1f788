"""Peer recovery for Python training functions (run_config.failure_config.peer_recovery):
traintl.train.torch.run_steps and the process group it rebuilds. The same protocol as the
C++ traintl::torch::run_steps (worker/sdk/include/traintl/torch_recovery.h,
docs/WORKER_PROTOCOL.md "Peer recovery"):

- the job's process group is plain Gloo over a TCPStore that rank 0's process serves
  (a replacement rank 0 serves it again on the attempt's port), under the key prefix
  traintl/generation_<G>;
- prepare_model does not wrap the module in DistributedDataParallel, whose reducer cannot
  go on after a collective failed in the middle of backward: GradientSync averages the
  gradients of each backward pass in one allreduce, statelessly from one pass to the next;
- when a step fails and the head announces a regroup, the group is rebuilt with the
  replacement, the rank that completed the most steps sends torch.save(get_state()) to the
  others, and every rank continues its report sequence.
"""

import datetime
import io
import json

import torch
import torch.distributed as dist

from traintl.train import _session

_store = None        # the TCPStore this process talks through (rank 0: also the server)
_store_port = 0      # the port of the store this process serves (0: none)
_generation = 0      # the generation the default group belongs to
_joined = False      # a replacement took a survivor's state


def enabled():
    ctx = _session.context()
    world = ctx.get("world_size")
    return (ctx.get("peer_recovery") is True and isinstance(world, int) and world > 1
            and not (ctx.get("use_gpu") is True and torch.cuda.is_available()))


def place():
    """(rank, world size) of this rank in its group: its place in the context's group_ranks
    (an elastic job's rank that joined a group of another size), else the job's."""
    ctx = _session.context()
    rank, world = ctx["world_rank"], ctx["world_size"]
    group = ctx.get("group_ranks")
    if isinstance(group, list) and rank in group:
        return group.index(rank), len(group)
    return rank, world


def joining():
    """True for a replacement rank until it took a survivor's state."""
    gen = _session.context().get("regroup_generation")
    return isinstance(gen, int) and gen > 0 and not _joined


def _timeout():
    t = _session.context().get("collective_timeout_s")
    return datetime.timedelta(seconds=t if isinstance(t, int) and t > 0 else 300)


def init_group(rank, world_size, master_addr, master_port, generation=None):
    """Initializes the default group as generation `generation` (default: the context's
    regroup_generation, 0 for the attempt's ranks)."""
    global _store, _store_port, _generation
    if generation is None:
        gen = _session.context().get("regroup_generation")
        generation = gen if isinstance(gen, int) and gen > 0 else 0
    if rank == 0 and _store_port != master_port:
        # The group's first rank serves its store: the attempt's rank 0 once, or in an
        # elastic job the first rank left, on the port the head reserved for it.
        _store = dist.TCPStore(master_addr, master_port, world_size, True, _timeout(),
                               wait_for_workers=False)
        _store_port = master_port
    elif rank != 0:
        # A new connection every generation: the old one may have died with rank 0.
        from traintl.train import torch as train_torch
        train_torch._wait_for_store(master_addr, master_port, int(_timeout().total_seconds()))
        _store = dist.TCPStore(master_addr, master_port, world_size, False, _timeout())
    store = dist.PrefixStore(f"traintl/generation_{generation}", _store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=_timeout())
    _generation = generation


class GradientSync:
    """Averages a module's gradients across the ranks once per backward pass: each
    parameter's gradient of the pass is taken by a hook (AccumulateGrad gets zeros), and at
    the end of the pass one allreduce of them all is added to .grad, as the C++
    traintl::torch::prepare_model does. Nothing carries over from a failed pass."""

    def __init__(self, module):
        from torch.autograd import Variable
        self._engine = Variable._execution_engine
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._grads = {}
        self._queued = False
        for i, p in enumerate(self._params):
            p.register_hook(lambda g, i=i: self._on_grad(i, g))

    def _on_grad(self, i, grad):
        if not self._queued:
            self._queued = True
            self._engine.queue_callback(self._finalize)
        self._grads[i] = grad
        return torch.zeros_like(grad)

    def _finalize(self):
        grads, self._grads, self._queued = self._grads, {}, False
        world = dist.get_world_size()
        flat = torch.cat([
            (grads[i] if i in grads else torch.zeros_like(p)).reshape(-1).div(world)
            for i, p in enumerate(self._params)])
        dist.all_reduce(flat)
        offset = 0
        with torch.no_grad():
            for p in self._params:
                n = p.numel()
                avg = flat[offset:offset + n].view_as(p)
                offset += n
                if p.grad is None:
                    p.grad = avg.clone()
                else:
                    p.grad.add_(avg)

    def reset(self):
        self._grads, self._queued = {}, False


_syncs = []


def prepare(model):
    """prepare_model's peer-recovery path: rank 0's parameters and buffers to every rank
    (not for a replacement, which takes a survivor's state in run_steps), then the
    gradient hooks."""
    if not joining():
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t.data, 0)
    _syncs.append(GradientSync(model))
    return model


def _regroup(generation):
    ctx = _session.context()
    rank, world = place()
    addr, port = ctx.get("master_addr") or "127.0.0.1", ctx["master_port"]
    info = _session.native().regroup_info()
    info = json.loads(info) if info else {}
    if info.get("generation") == generation and info.get("ranks"):
        # An elastic group of another size: this rank's place in it, and where it meets.
        ranks = info["ranks"]
        if ctx["world_rank"] not in ranks:
            raise RuntimeError(f"rank {ctx['world_rank']} is not in the group of generation "
                               f"{generation}")
        rank, world = ranks.index(ctx["world_rank"]), len(ranks)
        addr, port = info["store_addr"], info["store_port"]
    try:
        dist.destroy_process_group()
    except Exception:  # a group broken by the dead peer: a new one is made anyway
        pass
    init_group(rank, world, addr, port, generation)
    for s in _syncs:
        s.reset()
    _session.native().log(1, f"traintl: regrouped as generation {generation}")


def _resync(native, get_state, set_state, next_step, have_state):
    """Every rank agrees on the state of the rank that completed the most steps; returns
    the step to run next."""
    global _joined
    mine = torch.tensor([next_step if have_state else -1, native.next_report_seq()],
                        dtype=torch.long)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    steps = [int(t[0]) for t in everyone]
    best = max(steps)
    if best < 0:
        raise RuntimeError("peer recovery: no rank holds the training state any more")
    source = steps.index(best)
    seq = int(everyone[source][1])
    if dist.get_rank() == source:
        buf = io.BytesIO()
        torch.save(get_state(), buf)
        data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([data.numel()], dtype=torch.long)
    else:
        size = torch.zeros(1, dtype=torch.long)
    dist.broadcast(size, source)
    if dist.get_rank() != source:
        data = torch.empty(int(size[0]), dtype=torch.uint8)
    dist.broadcast(data, source)
    if dist.get_rank() != source and (not have_state or next_step < best):
        set_state(torch.load(io.BytesIO(data.numpy().tobytes())))
    native.skip_report_seq(seq)
    _joined = True
    native.log(1, f"traintl: peer recovery: rank {dist.get_rank()} continues at step {best} "
                  f"with the state of rank {source} ({int(size[0])} bytes)")
    return best


def run_steps(step, num_steps, first_step=0, model=None, optimizer=None, get_state=None,
              set_state=None):
    """Runs step(i) for i in range(first_step, num_steps) while the job is not asked to
    stop, surviving the death of a rank when the job has peer_recovery (see
    traintl.train.torch.run_steps). Returns the step it would run next."""
    native = _session.native()
    if get_state is None or set_state is None:
        if model is None:
            raise ValueError("run_steps needs model (and optimizer) or get_state and set_state")
        module = getattr(model, "module", model)

        def get_state():
            state = {"model": module.state_dict()}
            if optimizer is not None:
                state["optimizer"] = optimizer.state_dict()
            return state

        def set_state(state):
            module.load_state_dict(state["model"])
            if optimizer is not None:
                optimizer.load_state_dict(state["optimizer"])
    i = first_step
    if not enabled():
        while i < num_steps and not native.should_stop():
            step(i)
            i += 1
        return i
    from traintl.train import torch as train_torch
    train_torch._ensure_process_group()
    if joining():
        i = _resync(native, get_state, set_state, i, have_state=False)
    timeout_ms = int(_timeout().total_seconds() * 1000)
    while i < num_steps and not native.should_stop():
        announced = native.regroup_wait(_generation + 1, 0)
        if announced > 0:
            _regroup(announced)
            i = _resync(native, get_state, set_state, i, have_state=True)
            continue
        try:
            step(i)
            i += 1
        except Exception as e:
            generation = native.regroup_wait(_generation + 1, timeout_ms)
            if generation <= 0:
                raise
            native.log(2, f"traintl: peer recovery: step {i} failed ({e!r}); regrouping as "
                          f"generation {generation}")
            _regroup(generation)
            i = _resync(native, get_state, set_state, i, have_state=True)
    # A rank that joins as the last step ends (an elastic group growing) waits for the
    # others in its rendezvous: meet it and hand it the final state.
    if i >= num_steps:
        announced = native.regroup_wait(_generation + 1, 0)
        if announced > 0:
            _regroup(announced)
            _resync(native, get_state, set_state, i, have_state=True)
    return i
