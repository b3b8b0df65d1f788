#!/usr/bin/python3
"""The Python peer's worker: one rank of distributed XGBoost without traintl.

    py_worker.py --rank R --world W --train CSV --valid CSV --rounds N --out DIR
                 [--max-depth 3 --eta 0.1 --seed 0]

Started by py_driver.py with the tracker's DMLC_TRACKER_URI / DMLC_TRACKER_PORT in its
environment (and OMP_NUM_THREADS=1). It does what examples/xgboost/train.cc does through
traintl::xgboost, with XGBoost's Python package (Debian's python3-xgboost 1.7):

- joins the collective: xgboost.collective.CommunicatorContext(DMLC_TRACKER_URI,
  DMLC_TRACKER_PORT, DMLC_TASK_ID=rank), as traintl's Collective does (which passes the
  same three plus the world size);
- reads its rows of the training CSV as traintl's split dataset shard gives them (see
  shard_rows) and all rows of the validation CSV, as float32 (np.loadtxt; Debian's Python
  has no pandas), label = the "label" column, features = the others, in the file's order;
- xgboost.train with train.cc's parameters (objective binary:logistic, tree_method hist,
  max_depth, eta, seed, eval_metric logloss then error; no nthread: OMP_NUM_THREADS=1, as
  the job's env sets it) and evals [(train, "train"), (valid, "validation")], printing the
  eval line every round on rank 0 (verbose_eval 1, as traintl's train() logs it).

Rank 0 stamps time.time() at the script's first line, after `import xgboost`, after the
collective is joined, after both DMatrix are built, and after each round (a callback after
XGBoost's EvaluationMonitor, so after the round's update, evaluation and printed line: the
same point as the timestamp of traintl's per-round log line), and writes them with the
final metrics to DIR/rank0.json (the round stamps also to DIR/first_round, as soon as the
first round is done).
"""
import time

T_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402
import xgboost as xgb  # noqa: E402

T_IMPORTED = time.time()


def count_rows(path):
    """Data rows of a CSV file with a header row."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip()) - 1


def shard_rows(total, rank, world):
    """(first row, rows) of `rank`'s part of a split dataset, as traintl gives it without
    shuffling (worker/data/dataset.cc: PlanEpoch, RowsPerRank): every rank gets
    ceil(total / world) contiguous rows starting at rank * that, the last ranks' parts padded
    with rows from the start; traintl::xgboost::FromShard drops the padding (drop_padding),
    so a rank keeps min(per_rank, total - rank * per_rank) rows."""
    per_rank = (total + world - 1) // world
    start = rank * per_rank
    return start, max(0, min(per_rank, total - start))


def load(path, start, rows):
    with open(path) as f:
        header = f.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1 + start, max_rows=rows,
                      dtype=np.float32, ndmin=2)
    label = header.index("label")
    features = [i for i in range(len(header)) if i != label]
    m = xgb.DMatrix(np.ascontiguousarray(data[:, features]), label=data[:, label],
                    feature_names=[header[i] for i in features])
    return m


class Stamps(xgb.callback.TrainingCallback):
    def __init__(self, out, rank):
        super().__init__()
        self.out, self.rank, self.t = out, rank, []

    def after_iteration(self, model, epoch, evals_log):
        self.t.append(time.time())
        if self.rank == 0 and len(self.t) == 1:  # XGBoost's rank 0
            with open(os.path.join(self.out, "first_round.tmp"), "w") as f:
                f.write(repr(self.t[0]))
            os.rename(os.path.join(self.out, "first_round.tmp"),
                      os.path.join(self.out, "first_round"))
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--valid", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--eta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-print", action="store_true",
                    help="no per-round eval line (the rounds are still evaluated)")
    a = ap.parse_args()

    comm = {"DMLC_TRACKER_URI": os.environ["DMLC_TRACKER_URI"],
            "DMLC_TRACKER_PORT": int(os.environ["DMLC_TRACKER_PORT"]),
            "DMLC_TASK_ID": str(a.rank)}
    stamps = {"start": T_START, "imported": T_IMPORTED}
    with xgb.collective.CommunicatorContext(**comm):
        stamps["joined"] = time.time()
        rank = xgb.collective.get_rank()  # = the task id: the driver's tracker sorts by task
        # As train.cc: the training rows first, then the validation rows (creating a
        # DMatrix is a collective operation: every rank makes the same ones in order).
        total = count_rows(a.train)
        start, rows = shard_rows(total, a.rank, a.world)
        dtrain = load(a.train, start, rows)
        dvalid = load(a.valid, 0, count_rows(a.valid))
        stamps["data"] = time.time()
        params = {"objective": "binary:logistic", "tree_method": "hist",
                  "max_depth": a.max_depth, "eta": a.eta, "seed": a.seed,
                  "eval_metric": ["logloss", "error"]}
        cb = Stamps(a.out, rank)
        history = {}
        xgb.train(params, dtrain, a.rounds, evals=[(dtrain, "train"), (dvalid, "validation")],
                  evals_result=history, verbose_eval=False,
                  callbacks=([] if a.no_print else [xgb.callback.EvaluationMonitor(period=1)])
                  + [cb])
        stamps["trained"] = time.time()
    if rank == 0:
        final = {f"{s}-{m}": v[-1] for s, ms in history.items() for m, v in ms.items()}
        with open(os.path.join(a.out, "rank0.json"), "w") as f:
            json.dump({"stamps": stamps, "rounds": cb.t, "final": final,
                       "rows": rows, "first_row": start, "task": a.rank, "total_rows": total,
                       "xgboost": xgb.__version__}, f)


if __name__ == "__main__":
    main()
