// Interop check of coordrun with Apache Curator, driven by
// ensemble/curator_test.go (which compiles it against Debian's jars).
//
// Usage: java CuratorInterop host:port[,host:port...]
//
// Prints "OK <step>" after each step that passed; any failure throws and
// exits non-zero. Every wait has a deadline.

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public class CuratorInterop {
    static final long WAIT_MS = 15000;

    static final long START = System.nanoTime();
    static volatile boolean closing;

    static void ok(String step) {
        System.out.println("OK " + step + "\t" + (System.nanoTime() - START) / 1000000 + "ms");
        System.out.flush();
    }

    static void expect(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static String str(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Takes lines from q until want arrives. */
    static void waitLine(BlockingQueue<String> q, String want) throws InterruptedException {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        StringBuilder seen = new StringBuilder();
        while (true) {
            long left = deadline - System.currentTimeMillis();
            String line = left > 0 ? q.poll(left, TimeUnit.MILLISECONDS) : null;
            if (line == null) {
                throw new AssertionError("timed out waiting for '" + want + "'; saw [" + seen + "]");
            }
            if (line.equals(want)) {
                return;
            }
            seen.append(line).append("; ");
        }
    }

    interface Cond {
        boolean holds() throws Exception;
    }

    /** Polls cond until it holds or the deadline passes. */
    static void waitFor(String what, Cond cond) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (!cond.holds()) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError("timed out waiting for " + what);
            }
            Thread.sleep(10);
        }
    }

    static CuratorFramework client(String hosts) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(10000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(50, 5, 250))
                .build();
        // Nothing in this program should ever lose its connection: fail at
        // once rather than after Curator's retries give up.
        c.getConnectionStateListenable().addListener((client, state) -> {
            if (!closing && (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST)) {
                System.out.println("FAIL connection " + state);
                System.out.flush();
                System.exit(1);
            }
        });
        c.start();
        expect(c.blockUntilConnected((int) WAIT_MS, TimeUnit.MILLISECONDS), "connect to " + hosts);
        return c;
    }

    public static void main(String[] args) {
        // Exit explicitly: after a failure Curator's and ZooKeeper's
        // threads would keep the JVM alive until the test's deadline.
        int status = 0;
        try {
            run(args[0]);
        } catch (Throwable e) {
            e.printStackTrace();
            status = 1;
        }
        System.out.flush();
        System.exit(status);
    }

    static void run(String hosts) throws Exception {
        CuratorFramework a = client(hosts);
        ok("connected");

        // Parents as containers (opcode 19), the node itself with create2.
        String p = a.create().creatingParentContainersIfNeeded().forPath("/curator/deep/x/node", bytes("v"));
        expect(p.equals("/curator/deep/x/node"), "create path " + p);
        Stat st = new Stat();
        expect(str(a.getData().storingStatIn(st).forPath(p)).equals("v"), "data of " + p);
        expect(st.getVersion() == 0 && st.getDataLength() == 1, "stat of " + p + ": " + st);
        Stat parent = a.checkExists().forPath("/curator/deep/x");
        expect(parent != null && parent.getNumChildren() == 1 && parent.getEphemeralOwner() == 0,
                "container parent stat " + parent);
        ok("create_parent_containers");

        // CuratorCache: a persistent recursive watch (addWatch) on its root.
        BlockingQueue<String> events = new LinkedBlockingQueue<>();
        CuratorCache cache = CuratorCache.build(a, "/curator/cache");
        cache.listenable().addListener(CuratorCacheListener.builder()
                .forCreates(n -> events.add("create " + n.getPath() + " " + str(n.getData())))
                .forChanges((o, n) -> events.add("change " + n.getPath() + " " + str(o.getData()) + "->" + str(n.getData())))
                .forDeletes(o -> events.add("delete " + o.getPath()))
                .forInitialized(() -> events.add("initialized"))
                .build());
        cache.start();
        waitLine(events, "initialized");
        a.create().creatingParentContainersIfNeeded().forPath("/curator/cache/k", bytes("1"));
        waitLine(events, "create /curator/cache/k 1");
        a.create().forPath("/curator/cache/k/g", bytes("g"));
        waitLine(events, "create /curator/cache/k/g g");
        a.setData().forPath("/curator/cache/k", bytes("2"));
        waitLine(events, "change /curator/cache/k 1->2");
        a.delete().deletingChildrenIfNeeded().forPath("/curator/cache/k");
        waitLine(events, "delete /curator/cache/k");
        expect(!cache.get("/curator/cache/k").isPresent(), "cache still holds /curator/cache/k");
        ok("curator_cache");

        CuratorFramework b = client(hosts);

        // InterProcessMutex across two clients.
        InterProcessMutex m1 = new InterProcessMutex(a, "/curator/lock");
        InterProcessMutex m2 = new InterProcessMutex(b, "/curator/lock");
        expect(m1.acquire(WAIT_MS, TimeUnit.MILLISECONDS), "first client acquires the mutex");
        expect(m1.acquire(WAIT_MS, TimeUnit.MILLISECONDS), "mutex is re-entrant");
        m1.release();
        expect(!m2.acquire(0, TimeUnit.MILLISECONDS), "second client must not acquire a held mutex");
        // InterProcessMutex is per thread: the contender acquires and
        // releases in its own thread.
        CountDownLatch got = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Exception> err = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                if (m2.acquire(WAIT_MS, TimeUnit.MILLISECONDS)) {
                    got.countDown();
                    m2.release();
                }
            } catch (Exception e) {
                err.set(e);
            } finally {
                done.countDown();
            }
        });
        t.start();
        waitFor("the second client queued on the mutex", () -> m1.getParticipantNodes().size() == 2);
        expect(got.getCount() == 1, "second client acquired while the first held the mutex");
        m1.release();
        expect(got.await(WAIT_MS, TimeUnit.MILLISECONDS), "second client acquires after release: " + err.get());
        expect(done.await(WAIT_MS, TimeUnit.MILLISECONDS) && err.get() == null, "second client releases: " + err.get());
        t.join(WAIT_MS);
        // Another client's delete: a's member may not have applied it yet.
        waitFor("no lock nodes after release", () -> m1.getParticipantNodes().isEmpty());
        ok("mutex");

        // LeaderLatch: leadership passes when the leader closes its latch.
        LeaderLatch la = new LeaderLatch(a, "/curator/leader", "a");
        LeaderLatch lb = new LeaderLatch(b, "/curator/leader", "b");
        la.start();
        expect(la.await(WAIT_MS, TimeUnit.MILLISECONDS), "first latch becomes leader");
        lb.start();
        waitFor("both latch participants", () -> lb.getParticipants().size() == 2);
        expect(!lb.hasLeadership(), "second latch must not lead while the first does");
        expect(lb.getLeader().getId().equals("a"), "leader id " + lb.getLeader().getId());
        la.close();
        expect(lb.await(WAIT_MS, TimeUnit.MILLISECONDS), "second latch becomes leader after the first closes");
        waitFor("a single latch participant", () -> lb.getParticipants().size() == 1);
        expect(lb.getLeader().getId().equals("b"), "leader id " + lb.getLeader().getId());
        lb.close();
        ok("leader_latch");

        closing = true;
        cache.close();
        b.close();
        // The lock's parent is a container: the server may already have
        // deleted it now that it is empty.
        try {
            List<String> left = a.getChildren().forPath("/curator/lock");
            expect(left.isEmpty(), "lock nodes left: " + left);
        } catch (KeeperException.NoNodeException e) {
            // reaped
        }
        a.close();
        ok("closed");
    }
}
