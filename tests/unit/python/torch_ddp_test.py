"""traintl.train.torch with several ranks: prepare_model and prepare_data_loader in the
standalone mode (python3 processes as a {"command": [...]} entry point starts them,
rendezvous on 127.0.0.1), with this test as the agent of all. The process group is the
"traintl" backend (traintl._c10d: shared memory among a node's ranks, Gloo between nodes'
leaders), or "gloo" with TRAINTL_SHM_COLLECTIVES=0. Run by ctest as python.torch_ddp.
"""

import os
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent_harness import RankProcess, TempRoot, free_port  # noqa: E402

RANK_SCRIPT = textwrap.dedent("""
    import json
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from traintl import train

    torch.manual_seed(train.get_context().get_world_rank())  # different initial weights
    model = train.torch.prepare_model(torch.nn.Linear(4, 1))
    data = TensorDataset(torch.arange(16, dtype=torch.float32).unsqueeze(1).repeat(1, 4),
                         torch.arange(16))
    loader = train.torch.prepare_data_loader(
        DataLoader(data, batch_size=2, shuffle=True, drop_last=False))
    epochs = []
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        seen = []
        for x, idx in loader:
            assert x.device == train.torch.get_device()
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            seen += idx.tolist()
        epochs.append(seen)
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    train.report({"epochs": epochs, "params": params,
                  "wrapped": type(model).__name__, "batches": len(loader),
                  "world_size": dist.get_world_size(), "backend": dist.get_backend(),
                  "transport": getattr(dist.group.WORLD, "transport", dist.get_backend())})
""")


class TorchDdpTest(unittest.TestCase):
    def setUp(self):
        self.root = TempRoot()
        self.ranks = []

    def tearDown(self):
        for r in self.ranks:
            r.close()
        self.root.cleanup()

    def run_ranks(self, world, per_node, env=None):
        """Starts `world` ranks, `per_node` to a node; returns their first reports."""
        port = free_port()
        for rank in range(world):
            node = rank // per_node
            self.ranks.append(RankProcess(
                RANK_SCRIPT, self.root.path, rank=rank, world_size=world,
                context={"master_port": port, "local_rank": rank % per_node,
                         "local_world_size": min(per_node, world - node * per_node),
                         "node_rank": node}, env=env))
        reports = []
        for r in self.ranks:
            m = r.next_message()
            self.assertIsNotNone(m, r.log())
            self.assertEqual(m["seq"], 0)
            reports.append(m["metrics"])
        for r in self.ranks:
            r.ack(0)
        for r in self.ranks:
            code, out = r.finish()
            self.assertEqual(code, 0, f"stdout:\n{out}\nlog:\n{r.log()}")
        return reports

    def check_trained_in_step(self, reports, backend, transport):
        world = len(reports)
        for m in reports:
            self.assertEqual(m["wrapped"], "DistributedDataParallel")
            self.assertEqual(m["world_size"], world)
            self.assertEqual((m["backend"], m["transport"]), (backend, transport))
            self.assertEqual(m["batches"], 8 // world)
        for epoch in range(2):
            # Each rank reads its own part.
            self.assertEqual(sorted(sum((m["epochs"][epoch] for m in reports), [])),
                             list(range(16)))
        # set_epoch ran between the passes: the shuffle differs.
        self.assertNotEqual(reports[0]["epochs"][0], reports[0]["epochs"][1])
        # DDP broadcast rank 0's weights and averaged the gradients: still equal.
        for other in reports[1:]:
            for pa, pb in zip(reports[0]["params"], other["params"]):
                for x, y in zip(pa, pb):
                    if transport == "gloo":
                        self.assertAlmostEqual(x, y, places=5)
                    else:  # every rank copies the same sums out of the segment
                        self.assertEqual(x, y)

    def test_two_ranks_train_in_step_over_shared_memory(self):
        self.check_trained_in_step(self.run_ranks(2, 2), "traintl", "shm")

    def test_four_ranks_on_two_nodes_reduce_hierarchically(self):
        self.check_trained_in_step(self.run_ranks(4, 2), "traintl", "shm+gloo")

    def test_off_in_the_env_means_gloo(self):
        reports = self.run_ranks(2, 2, env={"TRAINTL_SHM_COLLECTIVES": "0"})
        self.check_trained_in_step(reports, "gloo", "gloo")


if __name__ == "__main__":
    unittest.main(verbosity=2)
