# Copyright: sparkfleet contributors
# Apache License 2.0
"""The NCCL probe: an all_gather across a cluster's nodes, a program of its own.

spark_cluster_nccl sends this file's source on stdin to python3 inside the
locked NGC image on every node at once (rank 0 on the first node). It joins
the others through torch.distributed (NCCL on the GPU; gloo where the
container sees no GPU, which it says, and which the verdict never counts as
NCCL), times the all_gather out of place and in place, checks every value
received, and rank 0 prints the result in nccl-tests' own table
(all_gather_perf's columns: size is the gathered output in bytes, busbw is
algbw * (ranks - 1) / ranks), so one parser reads this and a real nccl-tests
log alike.

Arguments: RANK RANKS MASTER_ADDR MASTER_PORT BYTES ITERS WARMUP SECONDS.
Written for any Python 3 an image may carry: no f-strings, no annotations.
"""

import datetime
import os
import socket
import sys
import time

NAME_BYTES = 256


def gather(dist, recv, send, chunks, nccl):
    if nccl:
        dist.all_gather_into_tensor(recv, send)
    else:
        dist.all_gather(chunks, send)


def say(line):
    sys.stdout.write(line + "\n")


def rendezvous(dist, rank, ranks, master, port, seconds):
    """The ranks' store: rank 0 serves it, the others dial MASTER_ADDR. torch's store server listens on every
    interface of the node (MASTER_ADDR is only what the others dial): rank 0 binds the socket to MASTER_ADDR (its
    rail's address) itself and hands it over (master_listen_fd), so that the store is reached over the rail
    alone, never the management network. Returns (store, the socket to keep open)."""
    timeout = datetime.timedelta(seconds=seconds)
    if rank != 0:
        return dist.TCPStore(master, port, world_size=ranks, is_master=False, timeout=timeout), None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((master, port))
    listener.listen(128)
    try:
        store = dist.TCPStore(master, port, world_size=ranks, is_master=True, timeout=timeout,
                              wait_for_workers=False, master_listen_fd=listener.fileno())
    except TypeError:  # a torch older than 2.1 takes no socket: its store listens on every interface
        listener.close()
        sys.stderr.write("sparkfleet: this torch cannot bind its store to %s; it listens on every interface\n"
                         % master)
        store = dist.TCPStore(master, port, world_size=ranks, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        listener = None
    return store, listener


def timed(torch, dist, recv, send, chunks, nccl, cuda, iters, warmup):
    for _warm in range(warmup):
        gather(dist, recv, send, chunks, nccl)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _timed in range(iters):
        gather(dist, recv, send, chunks, nccl)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def main(argv):
    rank, ranks, master, port, nbytes, iters, warmup, seconds = (
        int(argv[0]), int(argv[1]), argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), int(argv[7]))
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    store, _listener = rendezvous(dist, rank, ranks, master, port, seconds)
    dist.init_process_group(backend, store=store, rank=rank, world_size=ranks,
                            timeout=datetime.timedelta(seconds=seconds))
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    count = max(1, nbytes // ranks // 4)
    recv = torch.empty((count * ranks,), dtype=torch.float32, device=device)
    chunks = list(recv.chunk(ranks))
    send = torch.full((count,), float(rank), dtype=torch.float32, device=device)
    nccl = backend == "nccl"
    results = []
    for in_place in (False, True):
        recv.fill_(-1.0)
        source = chunks[rank] if in_place else send
        if in_place:
            source.fill_(float(rank))
        seconds_each = timed(torch, dist, recv, source, chunks, nccl, cuda, iters, warmup)
        expected = torch.arange(ranks, dtype=torch.float32, device=device).repeat_interleave(count)
        wrong = int((recv != expected).sum().item())
        results.append((seconds_each, wrong))
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    me = ("%d %d %s %s" % (rank, os.getpid(), socket.gethostname(), name.replace(" ", "_"))).encode()[:NAME_BYTES]
    # Who is who, gathered as bytes (all_gather_object needs numpy, which an image may lack).
    mine = torch.zeros(NAME_BYTES, dtype=torch.uint8, device=device)
    mine[:len(me)] = torch.tensor(list(me), dtype=torch.uint8, device=device)
    names = [torch.zeros(NAME_BYTES, dtype=torch.uint8, device=device) for _rank in range(ranks)]
    dist.all_gather(names, mine)
    everyone = [bytes(t.tolist()).rstrip(b"\0").decode(errors="replace") for t in names]
    if rank == 0:
        size = count * ranks * 4
        version = torch.cuda.nccl.version() if nccl else None
        say("# sparkfleet NCCL probe: all_gather through torch.distributed %s, backend %s%s" % (
            torch.__version__, backend, (", NCCL %s" % ".".join(str(v) for v in version)) if version else
            " (no GPU in the container: not NCCL)"))
        say("# nThread 1 nGpus 1 minBytes %d maxBytes %d warmup iters: %d iters: %d validation: 1" % (
            size, size, warmup, iters))
        say("#")
        say("# Using devices")
        for line in everyone:
            r, pid, host, device_name = line.split(" ", 3)
            say("#  Rank %2s Group  0 Pid %6s on %10s device  0 [0x00] %s" % (
                r, pid, host, device_name.replace("_", " ")))
        say("#")
        say("#                                                              out-of-place"
            "                       in-place")
        say("#       size         count      type   redop    root     time   algbw   busbw #wrong"
            "     time   algbw   busbw #wrong")
        say("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)")
        cells = []
        for seconds_each, wrong in results:
            algbw = size / seconds_each / 1e9
            cells.append("%8.1f %7.2f %7.2f %6d" % (seconds_each * 1e6, algbw, algbw * (ranks - 1) / ranks, wrong))
        say("%12d  %12d     float    none      -1 %s %s" % (size, count * ranks, cells[0], cells[1]))
        wrong_total = results[0][1] + results[1][1]
        busbw = sum(size / seconds_each / 1e9 * (ranks - 1) / ranks for seconds_each, _wrong in results) / 2
        say("# Out of bounds values : %d %s" % (wrong_total, "FAILED" if wrong_total else "OK"))
        say("# Avg bus bandwidth    : %g " % busbw)
        say("#")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
