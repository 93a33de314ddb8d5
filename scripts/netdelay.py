#!/usr/bin/python3
"""Delays every packet a network namespace receives by a fixed time: netem's `delay`, done in
user space over NFQUEUE, for kernels built without sch_netem (this machine's:
CONFIG_NET_SCH_NETEM is not set). scripts/ceph-netns.sh runs one per namespace.

    netdelay.py QUEUE_NUM DELAY_MS

The namespace's input goes to queue QUEUE_NUM (`iptables -t mangle -A PREROUTING -j NFQUEUE
--queue-bypass`); this process binds the queue in copy-meta mode (no payload crosses to user space, GSO
packets stay whole) and accepts each packet DELAY_MS after it was queued. Packets leave in the
order they came, so one batch verdict ("accept every id up to N") releases all that are due.
A lost queue message (socket overrun) is released by the next batch verdict, so nothing sticks.
Stops on SIGTERM; `bypass` lets packets through unqueued while no process is bound.
"""

import collections
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NF_ACCEPT = 1
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
SO_RCVBUFFORCE = 33


def attr(kind: int, payload: bytes) -> bytes:
    a = struct.pack("=HH", 4 + len(payload), kind) + payload
    return a + b"\0" * (-len(a) % 4)


def message(msg: int, queue: int, attrs: bytes, flags: int, seq: int) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg,
                       NLM_F_REQUEST | flags, seq, 0) + body


def configure(sock: socket.socket, queue: int, attrs: bytes, seq: int) -> None:
    sock.send(message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_ACK, seq))
    data = sock.recv(65536)
    length, kind = struct.unpack_from("=IH", data)
    if kind == NLMSG_ERROR:
        (err,) = struct.unpack_from("=i", data, 16)
        if err:
            raise OSError(-err, f"nfqueue config: {os.strerror(-err)}")


def main() -> None:
    queue, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    configure(sock, queue, attr(NFQA_CFG_CMD, struct.pack("=BxH", NFQNL_CFG_CMD_BIND, 0)), 1)
    configure(sock, queue, attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
              + attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 1 << 16))
              + attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))
              + attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)), 2)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pending: collections.deque = collections.deque()  # (due, packet id), in id order
    packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
    seq = 3
    while True:
        timeout = None
        if pending:
            timeout = max(0.0, pending[0][0] - time.monotonic())
        ready, _, _ = select.select([sock], [], [], timeout)
        if ready:
            data = sock.recv(1 << 20)
            now = time.monotonic()
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16:
                    break
                if kind == packet_type:
                    a = off + 20  # after nlmsghdr and nfgenmsg
                    end = off + length
                    while a + 4 <= end:
                        alen, atype = struct.unpack_from("=HH", data, a)
                        if alen < 4:
                            break
                        if atype & 0x7FFF == NFQA_PACKET_HDR:
                            (pid,) = struct.unpack_from("!I", data, a + 4)
                            pending.append((now + delay, pid))
                            break
                        a += (alen + 3) & ~3
                off += (length + 3) & ~3
        now = time.monotonic()
        last = None
        while pending and pending[0][0] <= now:
            last = pending.popleft()[1]
        if last is not None:
            verdict = attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last))
            sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue, verdict, 0, seq))
            seq += 1


if __name__ == "__main__":
    main()
