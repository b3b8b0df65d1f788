"""Datasets: a job reads "datasets" URIs through the SDK; bad data fails the job without
burning restarts, and the daemon stays healthy."""
import os
import shutil
import tempfile
import time

from harness import DaemonTestCase, lib_path, main

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                        "parquet")


def write_ids(path, first, rows):
    with open(path, "w") as f:
        f.write("id,x\n")
        for i in range(first, first + rows):
            f.write(f"{i},{i * 0.25}\n")


class DatasetTest(DaemonTestCase):
    def setUp(self):
        super().setUp()
        self.data = tempfile.mkdtemp(prefix="traintl-e2e-data-")

    def tearDown(self):
        shutil.rmtree(self.data, ignore_errors=True)
        super().tearDown()

    def spec(self, datasets, workers=2, max_failures=0, **config):
        return {
            "name": "datasets",
            "entrypoint": {"library": lib_path("libtest_data.so")},
            "train_loop_config": config,
            "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": 1}},
            "run_config": {"failure_config": {"max_failures": max_failures}},
            "datasets": datasets,
        }

    def test_split_dataset_gives_each_rank_a_balanced_disjoint_shard(self):
        write_ids(os.path.join(self.data, "train-0.csv"), 0, 100)
        write_ids(os.path.join(self.data, "train-1.csv"), 100, 3)
        write_ids(os.path.join(self.data, "val.csv"), 0, 10)
        uri = f"file://{self.data}/train-*.csv"
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"uri": uri}, "val": {"uri": f"file://{self.data}/val.csv"}},
            batch_size=8, epochs=2, shuffle=True))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        # Every rank reports; the metrics history holds rank 0's. Rank 0 read 52 rows
        # (ceil(103 / 2)) in 7 batches, every epoch.
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        self.assertEqual(len(history), 2)
        for h in history:
            m = h["metrics"]
            self.assertEqual(m["rows"], 52)
            self.assertEqual(m["batches"], 7)
            self.assertEqual(m["num_rows"], 52)
            self.assertEqual(len(set(m["ids"])), 52)
        # The shuffle differs between epochs.
        self.assertNotEqual(history[0]["metrics"]["ids"], history[1]["metrics"]["ids"])

    def test_later_jobs_reuse_the_nodes_row_index(self):
        path = os.path.join(self.data, "train.csv")
        write_ids(path, 0, 2000)
        # Entries are stored only for files unchanged for 2 s (index_cache.h).
        time.sleep(2.2)
        index_dir = os.path.join(self.daemon.data_dir, "data_index")
        spec = self.spec({"train": {"uri": f"file://{path}"}}, batch_size=100, epochs=1)
        ids = []
        mtimes = []
        for _ in range(2):
            job_id = self.daemon.submit_spec(spec)
            job = self.daemon.wait_terminal(job_id)
            self.assertEqual(job["state"], "SUCCEEDED", job)
            ids.append(self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"][0]
                       ["metrics"]["ids"])
            entries = [e for e in os.listdir(index_dir) if e.endswith(".idx")]
            self.assertEqual(len(entries), 1, os.listdir(index_dir))
            st = os.stat(os.path.join(index_dir, entries[0]))
            mtimes.append((st.st_ino, st.st_mtime_ns))
            time.sleep(0.05)
        # The node's directory is the workers' alone.
        self.assertEqual(os.stat(index_dir).st_mode & 0o777, 0o700)
        # The second job loaded the first one's entry (a load marks its use; a scan would
        # have stored a new file), and read the same shard.
        self.assertEqual(mtimes[1][0], mtimes[0][0])
        self.assertGreater(mtimes[1][1], mtimes[0][1])
        self.assertEqual(ids[0], ids[1])
        self.assertEqual(len(ids[0]), 1000)

    def test_bad_data_fails_the_job_without_restarts(self):
        with open(os.path.join(self.data, "bad.csv"), "w") as f:
            f.write("id,x\n1,2\n3,4,5\n")
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"uri": f"file://{self.data}/bad.csv"}}, max_failures=3))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertEqual(job["attempt"], 1)  # max_failures=3 left unused
        self.assertIn("bad.csv:3", job["message"])
        self.assertIn("expected 2 fields", job["message"])
        self.assertIn("not retried", job["message"])
        self.assertEqual(self.daemon.get("/healthz", auth=False)[0], 200)

    def test_missing_files_fail_the_job_without_restarts(self):
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"uri": f"file://{self.data}/nothing-*.csv"}}, workers=1, max_failures=2))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertEqual(job["attempt"], 1)
        self.assertIn("matches no files", job["message"])
        # The daemon still runs jobs.
        write_ids(os.path.join(self.data, "ok.csv"), 0, 5)
        ok = self.daemon.submit_spec(self.spec(
            {"train": {"uri": f"file://{self.data}/ok.csv"}}, workers=1))
        self.assertEqual(self.daemon.wait_terminal(ok)["state"], "SUCCEEDED")

    def test_inline_items_are_split_like_a_file(self):
        # ray.data.from_items: small data in the spec itself, read as JSON records and split
        # across the ranks as a file would be.
        items = [{"id": i, "x": i * 0.5} for i in range(11)]
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"items": items}, "val": {"items": [3, 4]}}, batch_size=4, epochs=2))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        self.assertEqual(len(history), 2)
        status, ranks = self.daemon.get(f"/v1/jobs/{job_id}/metrics?ranks=all")
        seen = []
        for reports in ranks["ranks"].values():
            self.assertEqual(reports[0]["metrics"]["rows"], 6)  # ceil(11 / 2) each
            seen += reports[0]["metrics"]["ids"]
        self.assertEqual(set(seen), set(range(11)))
        # A non-object item stands for {"item": it}; the spec keeps what was given.
        val = self.daemon.submit_spec(self.spec({"train": {"items": [3, 4, 5]}}, workers=1,
                                                column="item"))
        job = self.daemon.wait_terminal(val)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["metrics"]["ids"], [3, 4, 5])
        self.assertEqual(self.daemon.job(job_id)["spec"]["datasets"]["train"]["items"], items)

    def test_inline_items_are_checked_at_submit(self):
        for ds, field, words in (
                ({"items": [], "split": True}, "datasets.train.items", "non-empty array"),
                ({"items": {"a": 1}}, "datasets.train.items", "non-empty array"),
                ({"items": [{"a": 1}], "uri": f"file://{self.data}/t.csv"},
                 "datasets.train.items", "either"),
                ({"items": [{"a": 1}], "format": "csv"}, "datasets.train.format", "jsonl"),
                ({"items": [{"a": i} for i in range(10001)]}, "datasets.train.items",
                 "at most 10000"),
                ({"items": [{"a": "x" * 300000}]}, "datasets.train.items", "bytes as JSON"),
                ({"format": "csv"}, "datasets.train.uri", "or \"items\"")):
            status, body = self.daemon.post("/v1/jobs", {"spec": self.spec({"train": ds})})
            self.assertEqual(status, 400, body)
            self.assertEqual(body.get("field"), field, body)
            self.assertIn(words, body["error"])
        self.assertEqual(self.daemon.get("/v1/jobs")[1]["jobs"], [])

    def test_parquet_dataset_is_split_by_row_groups(self):
        # A file written by parquet-wasm (tests/fixtures/parquet): 60 rows in row groups of
        # 25, 25 and 10, the format told by the extension. Each of 2 ranks reads 30 rows,
        # rank 0 stopping and rank 1 starting inside row group 1.
        shutil.copy(os.path.join(FIXTURES, "types_snappy_dict_v1.parquet"),
                    os.path.join(self.data, "train.parquet"))
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"uri": f"file://{self.data}/train.parquet"}}, batch_size=8))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        status, ranks = self.daemon.get(f"/v1/jobs/{job_id}/metrics?ranks=all")
        self.assertEqual(status, 200, ranks)
        seen = {}
        for reports in ranks["ranks"].values():
            m = reports[0]["metrics"]
            self.assertEqual(m["rows"], 30)
            self.assertEqual(m["batches"], 4)
            self.assertEqual(m["num_rows"], 30)
            seen[m["rank"]] = m["ids"]
        self.assertEqual(seen, {0: list(range(30)), 1: list(range(30, 60))})

    def test_parquet_null_in_an_int_column_fails_the_job_naming_it(self):
        shutil.copy(os.path.join(FIXTURES, "null_in_int.parquet"),
                    os.path.join(self.data, "n.parquet"))
        job_id = self.daemon.submit_spec(self.spec(
            {"train": {"uri": f"file://{self.data}/n.parquet"}}, workers=1, max_failures=2,
            column="v"))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertEqual(job["attempt"], 1)  # bad data: not retried
        self.assertIn("n.parquet: row group 1, column 'v': row 17 of the row group is null",
                      job["message"])

if __name__ == "__main__":
    main()
