"""A stand-in for a TensorFlow MultiWorkerMirroredStrategy job (Debian 12 packages no
TensorFlow): it checks the TF_CONFIG that `"framework": "tensorflow"` gives each rank,
the way TensorFlow would use it. It parses TF_CONFIG, checks its shape (one
cluster.worker address per rank, task {"type": "worker", "index": RANK}), listens on its
own host:port from the list, connects to every peer's address (retrying while they start)
and exchanges ranks with each. Exit 0 only when all of that worked.

    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:20001", "127.0.0.1:20002"]},
                "task": {"type": "worker", "index": 0}}'
"""
import json
import os
import socket
import sys
import threading
import time

CONNECT_TIMEOUT_S = float(os.environ.get("PROBE_CONNECT_TIMEOUT_S", "30"))


def fail(message):
    print(f"probe: FAILED: {message}", flush=True)
    sys.exit(1)


def split_address(address):
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        fail(f"not a host:port address: {address!r}")
    return host, int(port)


def read_line(sock, deadline):
    data = b""
    while not data.endswith(b"\n"):
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def main():
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        fail("TF_CONFIG is not set")
    try:
        tf_config = json.loads(raw)
    except ValueError as e:
        fail(f"TF_CONFIG is not JSON: {e}: {raw!r}")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])

    workers = tf_config.get("cluster", {}).get("worker")
    task = tf_config.get("task", {})
    if not isinstance(workers, list) or len(workers) != world:
        fail(f"cluster.worker should list {world} addresses: {workers!r}")
    if len(set(workers)) != world:
        fail(f"cluster.worker has duplicate addresses: {workers!r}")
    if task.get("type") != "worker" or task.get("index") != rank:
        fail(f"task should be {{'type': 'worker', 'index': {rank}}}: {task!r}")
    print(f"probe: rank {rank}/{world} TF_CONFIG {raw}", flush=True)

    # Listen on this rank's own address (the port the head reserved for it).
    host, port = split_address(workers[rank])
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, port))
    except OSError as e:
        fail(f"cannot bind my address {workers[rank]}: {e}")
    server.listen(world)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S

    heard_from = set()
    errors = []

    def accept_peers():
        # Every peer connects once and says its rank; we answer with ours.
        server.settimeout(1.0)
        while len(heard_from) < world - 1 and time.monotonic() < deadline:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            with conn:
                try:
                    line = read_line(conn, deadline)
                    peer = int(line.split()[1])
                    conn.sendall(f"rank {rank}\n".encode())
                    heard_from.add(peer)
                except (OSError, ValueError, IndexError) as e:
                    errors.append(f"bad hello from a peer: {e}")

    acceptor = threading.Thread(target=accept_peers, daemon=True)
    acceptor.start()

    # Connect to every peer, retrying until it listens.
    reached = {}
    for peer, address in enumerate(workers):
        if peer == rank:
            continue
        peer_host, peer_port = split_address(address)
        while True:
            try:
                with socket.create_connection((peer_host, peer_port), timeout=2.0) as s:
                    s.sendall(f"rank {rank}\n".encode())
                    reached[peer] = read_line(s, deadline)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    fail(f"could not reach rank {peer} at {address}: {e}")
                time.sleep(0.2)
        if reached[peer] != f"rank {peer}":
            fail(f"{address} answered {reached[peer]!r}, expected 'rank {peer}'")

    acceptor.join(max(0.0, deadline - time.monotonic()))
    server.close()
    if errors:
        fail("; ".join(errors))
    expected = set(range(world)) - {rank}
    if heard_from != expected:
        fail(f"heard from ranks {sorted(heard_from)}, expected {sorted(expected)}")
    print(f"probe: rank {rank} exchanged ranks with {len(reached)} peers: OK", flush=True)

    # Report through traintl when it is there (the command entry point puts it on PYTHONPATH).
    try:
        from traintl import train
    except ImportError:
        return
    train.report({"peers": len(reached), "rank": rank, "world_size": world,
                  "my_address": workers[rank]})


if __name__ == "__main__":
    main()
