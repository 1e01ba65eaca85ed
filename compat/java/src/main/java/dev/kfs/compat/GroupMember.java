package dev.kfs.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;

/**
 * One consumer of a group on a thread of its own: it polls, counts every record it is given,
 * commits what it consumed (commitSync) after each poll and on revocation, and publishes its
 * assignment and generation for the scenario's thread to read.
 *
 * <p>The consumer is only ever touched by its own thread (KafkaConsumer is not thread-safe); the
 * scenario sees volatile snapshots and stops it with {@link #stop}.
 */
final class GroupMember implements ConsumerRebalanceListener, Runnable {
    /** Who owns each partition now, by the members' own callbacks: an overlap is a violation. */
    static final class Ownership {
        private final Map<TopicPartition, String> owners = new HashMap<>();
        final List<String> violations = new CopyOnWriteArrayList<>();

        synchronized void acquire(String member, Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                String previous = owners.put(tp, member);
                if (previous != null && !previous.equals(member)) {
                    violations.add(tp + " assigned to " + member + " while " + previous + " still owned it");
                }
            }
        }

        synchronized void release(String member, Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                owners.remove(tp, member);
            }
        }
    }

    final String name;
    private final KafkaConsumer<String, String> consumer;
    private final String topic;
    private final Ownership ownership;
    /** "partition@offset" -> how many times any member of the group was given it. */
    private final Map<String, AtomicInteger> seen;
    private final Map<TopicPartition, OffsetAndMetadata> uncommitted = new HashMap<>();
    final List<String> errors = new CopyOnWriteArrayList<>();
    /** onPartitionsAssigned/Revoked/Lost calls: a member that sat out a rebalance has none new. */
    final AtomicInteger callbacks = new AtomicInteger();
    final AtomicInteger consumed = new AtomicInteger();
    volatile Set<TopicPartition> assignment = Set.of();
    volatile int generation = -1;
    private volatile boolean stopping;
    private volatile CloseOptions.GroupMembershipOperation onClose = CloseOptions.GroupMembershipOperation.DEFAULT;
    private final Thread thread;

    GroupMember(String name, KafkaConsumer<String, String> consumer, String topic, Ownership ownership,
            Map<String, AtomicInteger> seen) {
        this.name = name;
        this.consumer = consumer;
        this.topic = topic;
        this.ownership = ownership;
        this.seen = seen;
        this.thread = new Thread(this, "member-" + name);
        this.thread.setDaemon(true);
    }

    static Map<String, AtomicInteger> newSeen() {
        return new ConcurrentHashMap<>();
    }

    GroupMember start() {
        thread.start();
        return this;
    }

    @Override
    public void run() {
        try {
            consumer.subscribe(List.of(topic), this);
            while (!stopping) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                    seen.computeIfAbsent(r.partition() + "@" + r.offset(), k -> new AtomicInteger()).incrementAndGet();
                    consumed.incrementAndGet();
                    uncommitted.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                commit(new HashSet<>(uncommitted.keySet()));
                assignment = Set.copyOf(consumer.assignment());
                generation = consumer.groupMetadata().generationId();
            }
        } catch (WakeupException | InterruptException e) {
            // stopped from outside
        } catch (RuntimeException e) {
            errors.add(name + ": " + Main.describe(e));
        } finally {
            try {
                consumer.close(CloseOptions.groupMembershipOperation(onClose).withTimeout(Duration.ofSeconds(10)));
            } catch (RuntimeException e) {
                errors.add(name + ": close: " + Main.describe(e));
            }
        }
    }

    /** commitSync the consumed offsets of {@code partitions}; a rebalance in progress: try again later. */
    private void commit(Set<TopicPartition> partitions) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : partitions) {
            OffsetAndMetadata offset = uncommitted.get(tp);
            if (offset != null) {
                offsets.put(tp, offset);
            }
        }
        if (offsets.isEmpty()) {
            return;
        }
        try {
            consumer.commitSync(offsets, Duration.ofSeconds(10));
            offsets.keySet().forEach(uncommitted::remove);
        } catch (RebalanceInProgressException e) {
            // the partitions are still ours (or are being revoked, which commits them)
        }
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        callbacks.incrementAndGet();
        commit(new HashSet<>(partitions));
        for (TopicPartition tp : partitions) {
            if (uncommitted.remove(tp) != null) {
                errors.add(name + ": revoked " + tp + " before its consumed offsets were committed");
            }
        }
        ownership.release(name, partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        callbacks.incrementAndGet();
        errors.add(name + ": lost " + Context.show(partitions) + " (its generation was fenced)");
        partitions.forEach(uncommitted::remove);
        ownership.release(name, partitions);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        callbacks.incrementAndGet();
        ownership.acquire(name, partitions);
        assignment = Set.copyOf(consumer.assignment());
        generation = consumer.groupMetadata().generationId();
    }

    /** Stops the member and waits for its consumer to close: with or without a LeaveGroup. */
    void stop(CloseOptions.GroupMembershipOperation membership) throws InterruptedException {
        onClose = membership;
        stopping = true;
        thread.join(20_000);
        if (thread.isAlive()) {
            consumer.wakeup();
            thread.join(5_000);
        }
    }

    @Override
    public String toString() {
        return name + " gen " + generation + " owns " + Context.show(assignment);
    }

    /** The members together own every partition, each some, none twice, at one generation. */
    static boolean shareEvenly(List<GroupMember> members, int partitions) {
        Set<TopicPartition> union = new HashSet<>();
        int total = 0;
        int generation = members.get(0).generation;
        for (GroupMember m : members) {
            Set<TopicPartition> owned = m.assignment;
            if (owned.isEmpty() || m.generation != generation) {
                return false;
            }
            union.addAll(owned);
            total += owned.size();
        }
        return union.size() == partitions && total == partitions;
    }

    static String describe(List<GroupMember> members) {
        List<String> states = new ArrayList<>();
        for (GroupMember m : members) {
            states.add(m.toString());
        }
        return String.join(", ", states);
    }
}
