"""traintl.train.torch with two ranks: prepare_model and prepare_data_loader in the
standalone mode (two python3 processes as a {"command": [...]} entry point starts them,
gloo rendezvous on 127.0.0.1), with this test as the agent of both. Run by ctest as
python.torch_ddp.
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
                  "world_size": dist.get_world_size(), "backend": dist.get_backend()})
""")


class TorchDdpTest(unittest.TestCase):
    def setUp(self):
        self.root = TempRoot()
        self.ranks = []

    def tearDown(self):
        for r in self.ranks:
            r.close()
        self.root.cleanup()

    def test_two_ranks_train_in_step(self):
        port = free_port()
        for rank in range(2):
            self.ranks.append(RankProcess(
                RANK_SCRIPT, self.root.path, rank=rank, world_size=2,
                context={"master_port": port, "local_rank": rank}))
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

        a, b = reports
        for m in reports:
            self.assertEqual(m["wrapped"], "DistributedDataParallel")
            self.assertEqual(m["world_size"], 2)
            self.assertEqual(m["backend"], "gloo")
            self.assertEqual(m["batches"], 4)
        for epoch in range(2):
            # Each rank reads its own half.
            self.assertEqual(sorted(a["epochs"][epoch] + b["epochs"][epoch]), list(range(16)))
        # set_epoch ran between the passes: the shuffle differs.
        self.assertNotEqual(a["epochs"][0], a["epochs"][1])
        # DDP broadcast rank 0's weights and averaged the gradients: still equal.
        for pa, pb in zip(a["params"], b["params"]):
            for x, y in zip(pa, pb):
                self.assertAlmostEqual(x, y, places=5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
