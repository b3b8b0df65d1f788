#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

The seeds are committed; this script documents where they come from and regenerates
them (it removes nothing that is not a seed it writes, so crash reproducers or inputs
merged from fuzzing runs stay). Run from anywhere: python3 tests/fuzz/make_seeds.py
"""
import hashlib
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- job spec ----------------------------------------------------------------------
README_SPEC = {
    "name": "digits-ddp",
    "entrypoint": {"library": "build/examples/libdigits_train.so", "function": "train_loop"},
    "train_loop_config": {"lr": 0.01, "epochs": 20},
    "scaling_config": {
        "num_workers": 2, "use_gpu": False,
        "resources_per_worker": {"CPU": 1, "memory": "2GiB"},
        "placement_strategy": "PACK"},
    "run_config": {
        "storage_path": "/shared/traintl-results",
        "checkpoint_config": {"num_to_keep": 3, "checkpoint_score_attribute": "loss",
                              "checkpoint_score_order": "min"},
        "failure_config": {"max_failures": 3}},
    "datasets": {"train": {"uri": "file:///data/digits/train-*.csv", "format": "csv",
                           "split": True}},
    "env": {"OMP_NUM_THREADS": "1"},
    "priority": 0,
    "resume_from_checkpoint": "job:3f9c2a",
}
write("fuzz_job_spec", "readme", json.dumps(README_SPEC, indent=2))
with open(os.path.join(ROOT, "examples", "digits", "job.json"), "rb") as f:
    write("fuzz_job_spec", "digits", f.read())
write("fuzz_job_spec", "minimal", '{"name":"a","entrypoint":{"library":"/x.so"}}')
write("fuzz_job_spec", "gpu",
      '{"name":"g","entrypoint":{"library":"/x.so"},"scaling_config":{"num_workers":4,'
      '"use_gpu":true,"resources_per_worker":{"GPU":0.5,"CPU":2,"memory":1073741824,'
      '"fast_disk":1}},"num_gpus_per_worker":0.5}')
write("fuzz_job_spec", "shorthands",
      '{"name":"s","entrypoint":{"library":"/x.so","function":null},"num_cpus_per_worker":2,'
      '"scaling_config":{"placement_strategy":"STRICT_SPREAD"},'
      '"run_config":{"storage_path":null,"checkpoint_config":{"num_to_keep":null}},'
      '"datasets":{"my.data":{"uri":"https://h/x.npy","split":false},'
      '"val":{"uri":"http://h/v.jsonl","format":null}}}')
write("fuzz_job_spec", "bad_types",
      '{"name":"two words","entrypoint":{"library":""},"scaling_config":{"num_workers":"two"}}')
write("fuzz_job_spec", "unknown_field", '{"name":"a","entrypoint":{"library":"/x"},"bogus":1}')
write("fuzz_job_spec", "duplicate_key", '{"name":"a","name":"b","entrypoint":{"library":"/x"}}')
write("fuzz_job_spec", "deep", '{"name":"a","entrypoint":{"library":"/x"},'
      '"train_loop_config":' + '{"a":' * 120 + '1' + '}' * 121)
write("fuzz_job_spec", "unicode", '{"name":"a","entrypoint":{"library":"/x\\u00e9\\ud83d\\ude00"},'
      '"env":{"K":"\\u0000"}}')
write("fuzz_job_spec", "bad_utf8", b'{"name":"\xc3\x28","entrypoint":{"library":"/x"}}')
write("fuzz_job_spec", "memory_units",
      '{"name":"m","entrypoint":{"library":"/x"},"scaling_config":{"resources_per_worker":'
      '{"memory":"1.5Gi"}},"run_config":{"failure_config":{"max_failures":-1}},"priority":-5}')
write("fuzz_job_spec", "numbers", '{"name":"n","entrypoint":{"library":"/x"},"scaling_config":'
      '{"num_workers":1e3,"resources_per_worker":{"CPU":1e309}},"priority":18446744073709551616}')

# ---- HTTP requests -------------------------------------------------------------------
AUTH = "Authorization: Bearer fuzz-token\r\n"
SHA = hashlib.sha256(b"hello").hexdigest()


def req(method, target, body=b"", headers="", auth=True):
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (AUTH if auth else "") + headers
    if body or method in ("PUT", "POST"):
        head += f"Content-Length: {len(body)}\r\n"
    data = head.encode() + b"\r\n"
    return data + (body if isinstance(body, bytes) else body.encode())


H = "fuzz_http_request"
write(H, "healthz", req("GET", "/healthz", auth=False))
write(H, "list_jobs", req("GET", "/v1/jobs"))
write(H, "job", req("GET", "/v1/jobs/3f9c2a1b7d4e"))
write(H, "job_prefix_query", req("GET", "/v1/jobs/3f9/logs?rank=0&attempt=1&tail=10&follow=1"))
write(H, "stop", req("POST", "/v1/jobs/3f9c/stop"))
write(H, "checkpoints_metrics", req("GET", "/v1/jobs/ab/checkpoints") + req("GET", "/v1/jobs/ab/metrics"))
write(H, "nodes", req("GET", "/v1/nodes"))
write(H, "blob_put", req("PUT", "/v1/blobs/" + SHA, b"hello"))
write(H, "blob_head", req("HEAD", "/v1/blobs/" + SHA))
write(H, "submit", req("POST", "/v1/jobs", json.dumps(
    {"spec": README_SPEC, "library_sha256": SHA, "submission_id": "s1"})))
write(H, "submit_chunked",
      f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{AUTH}Transfer-Encoding: chunked\r\n\r\n"
      "5\r\n{\"spe\r\n3\r\nc\":\r\n1\r\n1\r\n1\r\n}\r\n0\r\n\r\n")
write(H, "no_token", req("GET", "/v1/jobs", auth=False))
write(H, "wrong_token", req("GET", "/v1/jobs", headers="Authorization: Bearer nope\r\n", auth=False))
write(H, "cluster_route", req("POST", "/v1/internal/events", b'{"events": []}',
                            headers="Authorization: Bearer fuzz-cluster\r\n", auth=False) +
      req("POST", "/v1/internal/events", b'{"events": []}') +
      req("GET", "/v1/jobs", headers="Authorization: Bearer fuzz-cluster\r\n", auth=False))
write(H, "traversal", req("GET", "/v1/jobs/../logs") + req("GET", "/v1/jobs/%2e%2e/logs") +
      req("GET", "/v1/jobs/a%2Fb") + req("GET", "/v1/jobs/%2E./metrics"))
write(H, "nul", req("GET", "/v1/jobs/a%00b"))
write(H, "bad_percent", req("GET", "/v1/jobs/%zz?x=%"))
write(H, "pipelined_keepalive", req("GET", "/healthz", auth=False) + req("GET", "/v1/nodes") +
      req("GET", "/v1/jobs/x/logs?tail=3"))
write(H, "http10", b"GET /v1/jobs/abc/logs HTTP/1.0\r\n" + AUTH.encode() + b"\r\n")
write(H, "expect_continue", req("PUT", "/v1/blobs/" + SHA, b"hello", headers="Expect: 100-continue\r\n"))
write(H, "too_large", req("PUT", "/v1/blobs/" + SHA, headers="Content-Length: 99999999\r\n")[:200])
write(H, "method_not_allowed", req("DELETE", "/v1/jobs"))
write(H, "bad_te", f"POST /v1/jobs HTTP/1.1\r\n{AUTH}Transfer-Encoding: gzip\r\n\r\n")
write(H, "absolute_form", b"GET http://x/v1/jobs HTTP/1.1\r\n\r\n")
write(H, "invalid_utf8_body", req("POST", "/v1/jobs", b'{"spec":{"name":"\xff\xfe"}}'))
# Trailers and chunk extensions: Beast 1.74 does not count them against the header limit,
# and a field of 64 KiB or more made it throw out of the read handler (daemon abort).
CHUNKED = "Transfer-Encoding: chunked\r\n\r\n"
write(H, "trailer_small", f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{AUTH}{CHUNKED}"
      "2\r\n{}\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n")
write(H, "trailer_huge_no_token", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + CHUNKED +
      "0\r\nX-T: " + "a" * 70000 + "\r\n\r\n")
write(H, "trailer_huge_token", f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{AUTH}{CHUNKED}"
      "0\r\nX-T: " + "a" * 65535 + "\r\n\r\n")
write(H, "trailer_many", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + CHUNKED + "0\r\n" +
      "".join(f"X-T{i}: v\r\n" for i in range(2000)) + "\r\n")
write(H, "chunk_ext_huge", f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{AUTH}{CHUNKED}"
      "2;e=" + "x" * 70000 + "\r\n{}\r\n0\r\n\r\n")
write(H, "last_chunk_ext_huge", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + CHUNKED +
      "0;e=" + "x" * 70000 + "\r\n\r\n")
write(H, "deep_json", req("POST", "/v1/jobs", '{"spec":' + "[" * 5000 + "]" * 5000 + "}"))

# ---- worker messages -----------------------------------------------------------------
W = "fuzz_worker_message"
write(W, "session", '{"type":"hello","rank":0,"pid":123}\n'
      '{"type":"report","seq":0,"metrics":{"loss":0.5,"epoch":0},"checkpoint":null}\n'
      '{"type":"report","seq":1,"metrics":{"loss":0.25},"checkpoint":"/s/.staging/attempt_1/seq_1/rank_0"}\n'
      '{"type":"done","ok":true}\n')
write(W, "failure", '{"type":"done","ok":false,"error":"boom","retryable":false}\n')
write(W, "odd_types", '{"type":"done","ok":"yes","retryable":1,"error":7}\n'
      '{"type":"report","seq":4294967296,"metrics":[1]}\n{"type":"report","seq":-1}\n'
      '{"type":5}\n[1,2]\n{"type":"future","x":1}\n')
write(W, "partial", '{"type":"hello"}\n{"type":"rep')

# ---- raft commands -------------------------------------------------------------------
def cmd(op, rid, **fields):
    c = {"op": op, "rid": rid, "time": 1700000000000}
    c.update(fields)
    return json.dumps(c)


job = {"id": "abc123def456", "name": "t", "spec": {"name": "t", "run_config": {
    "failure_config": {"max_failures": 1}, "checkpoint_config": {"num_to_keep": 1,
    "checkpoint_score_attribute": "loss"}}}, "priority": 0, "library_sha256": "",
    "library_path": "/lib.so", "trial_dir": "/tmp/trial", "submitted_at": 1000}
J = "abc123def456"
seq = [
    cmd("submit_job", "r01", job=job, submission_id="sub"),
    cmd("set_pending_reason", "r02", job_id=J, reason="waiting"),
    cmd("start_attempt", "r03", job_id=J, attempt=1, restored_from=""),
    cmd("job_running", "r04", job_id=J, attempt=1),
    cmd("worker_event", "r05", job_id=J, attempt=1, rank=0, event="started", detail="pid 1"),
    cmd("report", "r06", job_id=J, attempt=1, seq=0, metrics={"loss": 0.5}),
    cmd("commit_checkpoint", "r07", job_id=J, attempt=1, seq=0, path="/tmp/trial/c0", metrics={"loss": 0.5}),
    cmd("commit_checkpoint", "r08", job_id=J, attempt=1, seq=1, path="/tmp/trial/c1", metrics={"loss": 0.4}),
    cmd("end_attempt", "r09", job_id=J, attempt=1, state="FAILED", failed_rank=1, exit_code=7,
        signal=None, reason="rank 1 exited", log_tail="", retryable=True),
    cmd("start_attempt", "r10", job_id=J, attempt=2, restored_from="/tmp/trial/c1"),
    cmd("stop_job", "r11", job_id=J),
    cmd("end_attempt", "r12", job_id=J, attempt=2, state="STOPPED", failed_rank=None,
        exit_code=None, signal=15, reason="stopped", log_tail="x", retryable=True),
]
R = "fuzz_raft_command"
write(R, "fail_pending", "\n".join(seq[:1] + [cmd("fail_pending_job", "r13", job_id=J,
                                                   reason="spec unreadable")]))
write(R, "lifecycle_lines", "\n".join(seq))
write(R, "replayed_rid", "\n".join(seq[:3] + [seq[2], seq[0]]))
write(R, "malformed", '{"op":"submit_job","rid":"x","job":{"id":1}}\n{"op":"nope","rid":"y"}\n'
      '{"rid":"z"}\n[]\n{"op":"report","rid":"w","job_id":"q","attempt":"1","seq":0,"metrics":{}}')


def entry(command, tag):
    b = command.encode()
    pad = (8 - len(b) % 8) % 8
    return struct.pack("<IIQ", 0x31435254, len(b), tag) + b + b"\0" * pad


write(R, "framed_entries", b"".join(entry(c, i + 1) for i, c in enumerate(seq[:6])))
write(R, "framed_bad_length", struct.pack("<IIQ", 0x31435254, 0xffffffff, 7) + b"{}")
write(R, "snapshot_header", struct.pack("<IIQ", 0x31535254, 0, 8) + b"SQLite f")
print("seeds written under", os.path.join(HERE, "corpus"))
