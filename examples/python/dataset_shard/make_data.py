"""Writes data.csv: 256 rows of 5 float features and a 0/1 label (fixed seed).
python3 make_data.py [rows]"""
import random
import sys

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 256
rng = random.Random(7)
weights = [1.5, -2.0, 0.5, 1.0, -0.75]
with open("data.csv", "w") as f:
    f.write("f0,f1,f2,f3,f4,label\n")
    for _ in range(rows):
        x = [round(rng.gauss(0.0, 1.0), 4) for _ in weights]
        label = int(sum(w * v for w, v in zip(weights, x)) + rng.gauss(0.0, 0.3) > 0)
        f.write(",".join(str(v) for v in x) + f",{label}\n")
