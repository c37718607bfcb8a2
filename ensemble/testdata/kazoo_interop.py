"""Interop check of coordrun with kazoo, driven by ensemble/kazoo_test.go.

Usage: kazoo_interop.py host:port[,host:port...]

Prints "OK <step>" after each step that passed. Before the reconnect step it
prints "PEER host:port" (the member the session is connected to) and waits
for a line on stdin: the test stops that member, then writes the line.
Every wait has a deadline; any failure raises and exits non-zero.
"""

import queue
import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError
from kazoo.protocol.states import EventType, KazooState

HOSTS = sys.argv[1]
WAIT = 15  # seconds, for anything that should happen promptly


def ok(step):
    print("OK " + step, flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def next_item(q, what):
    try:
        return q.get(timeout=WAIT)
    except queue.Empty:
        raise AssertionError("timed out waiting for " + what)


def wait_for(q, pred, what):
    """Takes items from q until one satisfies pred."""
    seen = []
    while True:
        try:
            item = q.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError("timed out waiting for %s; saw %r" % (what, seen))
        if pred(item):
            return item
        seen.append(item)


def until(pred, what):
    """Polls pred until it holds, for state another session changed: a
    member may answer a read before it has applied a write that another
    client already saw acknowledged (ZooKeeper promises no more without a
    sync)."""
    tick = threading.Event()
    for _ in range(int(WAIT / 0.02)):
        if pred():
            return
        tick.wait(0.02)
    raise AssertionError("timed out waiting for " + what)


def client():
    retry = dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5)
    zk = KazooClient(hosts=HOSTS, timeout=10.0, randomize_hosts=False,
                     connection_retry=retry, command_retry=retry)
    zk.start(timeout=WAIT)
    return zk


def main():
    zk = client()
    sid = zk.client_id[0]
    expect(sid != 0, "session id")
    ok("connected")

    zk.ensure_path("/kazoo/a/b")
    expect(zk.exists("/kazoo/a/b") is not None, "ensure_path created /kazoo/a/b")
    zk.ensure_path("/kazoo/a/b")  # idempotent
    ok("ensure_path")

    expect(zk.create("/kazoo/n", b"v1") == "/kazoo/n", "create path")
    data, st = zk.get("/kazoo/n")
    expect(data == b"v1" and st.version == 0 and st.data_length == 2, "get after create: %r %r" % (data, st))
    st = zk.set("/kazoo/n", b"v2")
    expect(st.version == 1, "set version %r" % (st,))
    try:
        zk.set("/kazoo/n", b"v3", version=0)
        raise AssertionError("set with a stale version succeeded")
    except BadVersionError:
        pass
    expect(zk.get("/kazoo/n")[0] == b"v2", "get after set")
    expect(sorted(zk.get_children("/kazoo")) == ["a", "n"], "children")
    zk.delete("/kazoo/n")
    expect(zk.exists("/kazoo/n") is None, "exists after delete")
    try:
        zk.get("/kazoo/n")
        raise AssertionError("get of a deleted node succeeded")
    except NoNodeError:
        pass
    zk.delete("/kazoo/a", recursive=True)
    expect(zk.exists("/kazoo/a") is None, "recursive delete")
    ok("crud")

    zk.create("/kazoo/e", b"eph", ephemeral=True)
    expect(zk.exists("/kazoo/e").ephemeralOwner == sid, "ephemeral owner")
    s0 = zk.create("/kazoo/q/s-", b"", sequence=True, makepath=True)
    s1 = zk.create("/kazoo/q/s-", b"", sequence=True)
    s2 = zk.create("/kazoo/q/es-", b"", ephemeral=True, sequence=True)
    expect((s0, s1, s2) == ("/kazoo/q/s-0000000000", "/kazoo/q/s-0000000001", "/kazoo/q/es-0000000002"),
           "sequence paths %r" % ((s0, s1, s2),))
    expect(zk.exists(s2).ephemeralOwner == sid, "ephemeral sequential owner")
    ok("ephemeral_sequence")

    dq = queue.Queue()

    @zk.DataWatch("/kazoo/w")
    def _data(data, stat, event):
        dq.put((data, event.type if event else None))

    expect(next_item(dq, "first DataWatch call") == (None, None), "DataWatch on a missing node")
    zk.create("/kazoo/w", b"1")
    wait_for(dq, lambda x: x == (b"1", EventType.CREATED), "DataWatch CREATED")
    zk.set("/kazoo/w", b"2")
    wait_for(dq, lambda x: x == (b"2", EventType.CHANGED), "DataWatch CHANGED")

    cq = queue.Queue()

    @zk.ChildrenWatch("/kazoo/w")
    def _children(children):
        cq.put(sorted(children))

    expect(next_item(cq, "first ChildrenWatch call") == [], "ChildrenWatch initial")
    zk.create("/kazoo/w/c1")
    wait_for(cq, lambda x: x == ["c1"], "ChildrenWatch after create c1")
    zk.create("/kazoo/w/c2")
    wait_for(cq, lambda x: x == ["c1", "c2"], "ChildrenWatch after create c2")
    zk.delete("/kazoo/w/c1")
    wait_for(cq, lambda x: x == ["c2"], "ChildrenWatch after delete c1")
    ok("watches")

    t = zk.transaction()
    t.create("/kazoo/t1", b"x")
    t.create("/kazoo/t2")
    t.set_data("/kazoo/t1", b"y")
    t.check("/kazoo/t1", 1)
    res = t.commit()
    expect(res[:2] == ["/kazoo/t1", "/kazoo/t2"] and res[2].version == 1 and res[3] is True,
           "transaction results %r" % (res,))
    expect(zk.get("/kazoo/t1")[0] == b"y", "transaction applied")
    t = zk.transaction()
    t.create("/kazoo/t3")
    t.check("/kazoo/t1", 99)
    t.delete("/kazoo/t2")
    res = t.commit()
    expect(isinstance(res[0], RolledBackError) and isinstance(res[1], BadVersionError),
           "failed transaction results %r" % (res,))
    expect(zk.exists("/kazoo/t3") is None and zk.exists("/kazoo/t2") is not None, "failed transaction rolled back")
    ok("transaction")

    zk2 = client()
    l1 = zk.Lock("/kazoo/lock", "one")
    l2 = zk2.Lock("/kazoo/lock", "two")
    expect(l1.acquire(timeout=WAIT), "first client acquires")
    expect(not l2.acquire(blocking=False), "second client must not acquire a held lock")
    got = threading.Event()

    def contend():
        if l2.acquire(timeout=WAIT):
            got.set()

    th = threading.Thread(target=contend)
    th.start()
    until(lambda: l1.contenders() == ["one", "two"], "the second client queued behind the first")
    expect(not got.is_set(), "second client acquired while the first held the lock")
    l1.release()
    expect(got.wait(WAIT), "second client acquires after release")
    th.join(WAIT)
    expect(l2.contenders() == ["two"], "contenders after hand-over")
    l2.release()
    until(lambda: zk.Lock("/kazoo/lock").contenders() == [], "no contenders at the end")
    zk2.stop()
    zk2.close()
    ok("lock")

    expect(zk.command(b"ruok") == "imok", "ruok")
    ok("ruok")
    version = zk.server_version()
    expect(len(version) >= 2 and version[0] == 3 and version[1] >= 6, "server_version %r" % (version,))
    ok("server_version " + ".".join(str(d) for d in version))

    lost, back = threading.Event(), threading.Event()

    def listener(state):
        if state == KazooState.SUSPENDED:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            back.set()
        elif state == KazooState.LOST:
            print("LOST", flush=True)

    zk.add_listener(listener)
    peer = zk._connection._socket.getpeername()[:2]
    print("PEER %s:%d" % peer, flush=True)
    sys.stdin.readline()  # the test stopped that member
    expect(lost.wait(WAIT), "connection loss noticed")
    expect(back.wait(WAIT), "reconnected")
    expect(zk.client_id[0] == sid, "same session after reconnect")
    newpeer = zk._connection._socket.getpeername()[:2]
    expect(newpeer != peer, "reconnected to another member")
    expect(zk.exists("/kazoo/e").ephemeralOwner == sid, "ephemeral survived the reconnect")
    # kazoo sends no setWatches; its DataWatch re-reads (and re-watches)
    # on reconnect, so a change after it still arrives.
    zk.set("/kazoo/w", b"3")
    wait_for(dq, lambda x: x[0] == b"3", "DataWatch after reconnect")
    zk.create("/kazoo/after", b"")
    ok("reconnect")

    zk.stop()
    zk.close()
    ok("done")


if __name__ == "__main__":
    main()
