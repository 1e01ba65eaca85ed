package dev.kfs.compat;

import static dev.kfs.compat.Checks.check;
import static dev.kfs.compat.Checks.checkEquals;
import static dev.kfs.compat.Checks.waitUntil;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.CloseOptions.GroupMembershipOperation;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;

/** Consumer groups on the classic protocol: rebalances under both assignors, and static members. */
final class GroupScenarios {
    static final int PARTITIONS = 6;
    static final int BATCH = 120;
    static final Duration SETTLE = Duration.ofSeconds(30);
    /** KFS's and Kafka's group.min.session.timeout.ms: the shortest a member may ask for. */
    static final int SESSION_TIMEOUT_MS = 6_000;

    private GroupScenarios() {}

    private static Map<String, Object> memberConfig(String group, String assignor, String clientId) {
        Map<String, Object> config = new HashMap<>();
        config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        config.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        config.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                assignor.equals("range") ? RangeAssignor.class.getName() : CooperativeStickyAssignor.class.getName());
        config.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, SESSION_TIMEOUT_MS);
        config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        config.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 30_000);
        return config;
    }

    private static void produce(KafkaProducer<String, String> producer, String topic, int from, int count)
            throws Exception {
        for (int i = from; i < from + count; i++) {
            producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i));
        }
        producer.flush();
    }

    /**
     * Two members share a six-partition topic, a third joins: every record is consumed exactly once
     * across the group, no partition is ever owned by two members, the group's committed offsets end
     * at the log end, and the group reports the assignor in use. Under cooperative-sticky the first
     * two members keep (a subset of) what they had.
     */
    static void rebalance(Context ctx, String assignor) throws Exception {
        String topic = ctx.name("");
        String group = ctx.name("group");
        GroupMember.Ownership ownership = new GroupMember.Ownership();
        Map<String, AtomicInteger> seen = GroupMember.newSeen();
        List<GroupMember> members = new ArrayList<>();
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of())) {
            ctx.createTopic(admin, topic, PARTITIONS, Map.of());
            ctx.step("two members joining");
            for (String name : List.of("c1", "c2")) {
                members.add(new GroupMember(name, ctx.consumer(memberConfig(group, assignor, ctx.name(name))), topic,
                        ownership, seen).start());
            }
            waitUntil("c1 and c2 to share the partitions", SETTLE,
                    () -> GroupMember.shareEvenly(members, PARTITIONS), () -> GroupMember.describe(members));
            int twoMemberGeneration = members.get(0).generation;
            Map<String, Set<TopicPartition>> before = new HashMap<>();
            members.forEach(m -> before.put(m.name, m.assignment));
            produce(producer, topic, 0, BATCH);
            waitUntil("the first batch consumed", SETTLE, () -> seen.size() >= BATCH, () -> seen.size() + " seen");

            ctx.step("a third member joining");
            members.add(new GroupMember("c3", ctx.consumer(memberConfig(group, assignor, ctx.name("c3"))), topic,
                    ownership, seen).start());
            produce(producer, topic, BATCH, BATCH); // while the group rebalances
            waitUntil("c1, c2 and c3 to share the partitions", SETTLE,
                    () -> GroupMember.shareEvenly(members, PARTITIONS)
                            && members.get(0).generation > twoMemberGeneration,
                    () -> GroupMember.describe(members));
            produce(producer, topic, 2 * BATCH, BATCH);
            waitUntil("every record consumed", SETTLE, () -> seen.size() >= 3 * BATCH,
                    () -> seen.size() + " of " + 3 * BATCH + " seen; " + GroupMember.describe(members));
            Thread.sleep(500); // a record delivered twice would show up now

            ctx.step("checking");
            List<String> twice = new ArrayList<>();
            seen.forEach((record, count) -> {
                if (count.get() != 1) {
                    twice.add(record + " x" + count.get());
                }
            });
            check(twice.isEmpty(), "records consumed more than once: %s", twice.subList(0, Math.min(10, twice.size())));
            check(seen.size() == 3 * BATCH, "%d records consumed, %d produced", seen.size(), 3 * BATCH);
            check(ownership.violations.isEmpty(), "a partition owned twice: %s", ownership.violations);
            members.forEach(m -> check(m.errors.isEmpty(), "%s", m.errors));
            if (assignor.equals("cooperative-sticky")) {
                for (GroupMember m : members.subList(0, 2)) {
                    check(before.get(m.name).containsAll(m.assignment),
                            "cooperative-sticky: %s had %s, now %s: a partition moved to it", m.name,
                            Context.show(before.get(m.name)), Context.show(m.assignment));
                }
            }
            ConsumerGroupDescription description =
                    Checks.get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group),
                            "describeConsumerGroups");
            checkEquals(GroupState.STABLE, description.groupState(), "the group's state");
            checkEquals(assignor, description.partitionAssignor(), "the group's assignor");
            checkEquals(3, description.members().size(), "the group's members");
            Set<TopicPartition> described = new HashSet<>();
            for (MemberDescription member : description.members()) {
                described.addAll(member.assignment().topicPartitions());
            }
            checkEquals(new HashSet<>(Context.partitions(topic, PARTITIONS)), described, "the described assignment");
            waitUntil("the committed offsets to reach the log end", Duration.ofSeconds(10),
                    () -> committedAtEnd(admin, group, topic), () -> "not yet");
        } finally {
            for (GroupMember m : members) {
                m.stop(GroupMembershipOperation.LEAVE_GROUP);
            }
        }
    }

    private static boolean committedAtEnd(Admin admin, String group, String topic) {
        try {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            Context.partitions(topic, PARTITIONS).forEach(tp -> latest.put(tp, OffsetSpec.latest()));
            Map<TopicPartition, ListOffsetsResultInfo> end = admin.listOffsets(latest).all().get();
            for (Map.Entry<TopicPartition, ListOffsetsResultInfo> e : end.entrySet()) {
                OffsetAndMetadata at = committed.get(e.getKey());
                long offset = at == null ? 0 : at.offset();
                if (offset != e.getValue().offset()) {
                    return false;
                }
            }
            return true;
        } catch (Exception e) {
            throw new Checks.Failed("listing offsets", e);
        }
    }

    /**
     * Static membership (group.instance.id): static-a joins and takes every partition, static-b joins
     * and they share them (static-a, the first, leads the group). Then one of them, {@code returning}
     * ("follower": static-b; "leader": static-a, whose last JoinGroup named the partitions it owned)
     * closes without a LeaveGroup and a new consumer with its instance id joins within
     * session.timeout.ms. It gets the same partitions at the same generation, and the other member
     * sees no rebalance (no callback, same generation); describeConsumerGroups lists both instance
     * ids with their partitions, and records produced then are consumed by both.
     */
    static void staticMembership(Context ctx, String returning) throws Exception {
        String topic = ctx.name("");
        String group = ctx.name("group");
        int partitions = 4;
        GroupMember.Ownership ownership = new GroupMember.Ownership();
        Map<String, AtomicInteger> seen = GroupMember.newSeen();
        List<GroupMember> running = new ArrayList<>();
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of())) {
            ctx.createTopic(admin, topic, partitions, Map.of());
            ctx.step("static-a joining");
            GroupMember a = staticMember(ctx, group, topic, "static-a", "a", ownership, seen);
            running.add(a);
            waitUntil("static-a to own every partition", SETTLE, () -> GroupMember.shareEvenly(running, partitions),
                    () -> GroupMember.describe(running));
            ctx.step("static-b joining");
            GroupMember b = staticMember(ctx, group, topic, "static-b", "b", ownership, seen);
            running.add(b);
            waitUntil("static-a and static-b to share the partitions", SETTLE,
                    () -> GroupMember.shareEvenly(running, partitions), () -> GroupMember.describe(running));
            Thread.sleep(1_000); // any rebalance still to come would start within a heartbeat or two
            check(GroupMember.shareEvenly(running, partitions), "the group did not settle: %s",
                    GroupMember.describe(running));
            int generation = a.generation;
            Map<String, Set<TopicPartition>> owned = Map.of(a.name, a.assignment, b.name, b.assignment);
            GroupMember leaving = returning.equals("leader") ? a : b;
            GroupMember staying = leaving == a ? b : a;
            int stayingCallbacks = staying.callbacks.get();

            ctx.step(leaving.name + " leaving without LeaveGroup");
            long left = System.nanoTime();
            leaving.stop(GroupMembershipOperation.REMAIN_IN_GROUP);
            running.remove(leaving);
            ctx.step(leaving.name + " coming back");
            GroupMember back = staticMember(ctx, group, topic, leaving.name, leaving == a ? "a2" : "b2", ownership, seen);
            running.add(back);
            waitUntil(leaving.name + " to get partitions back", Duration.ofMillis(SESSION_TIMEOUT_MS),
                    () -> !back.assignment.isEmpty(), () -> GroupMember.describe(running));
            long tookMs = (System.nanoTime() - left) / 1_000_000;
            check(tookMs < SESSION_TIMEOUT_MS, "%s took %d ms to come back, past its session timeout", back.name,
                    tookMs);
            Thread.sleep(1_500); // three heartbeats: a rebalance would reach the other member by now
            String before = "before: generation " + generation + ", static-a " + Context.show(owned.get(a.name))
                    + ", static-b " + Context.show(owned.get(b.name)) + "; now: " + GroupMember.describe(running);
            check(back.generation == generation && back.assignment.equals(owned.get(back.name)),
                    "%s came back at another generation or with other partitions: %s", back.name, before);
            check(staying.generation == generation && staying.assignment.equals(owned.get(staying.name))
                            && staying.callbacks.get() == stayingCallbacks,
                    "%s went through a rebalance (%d callbacks since the group settled): %s", staying.name,
                    staying.callbacks.get() - stayingCallbacks, before);

            ctx.step("consuming");
            produce(producer, topic, 0, 40);
            waitUntil("40 records consumed", SETTLE, () -> seen.size() >= 40, () -> seen.size() + " seen");
            check(back.consumed.get() > 0 && staying.consumed.get() > 0, "both members should consume: %s %d, %s %d",
                    staying.name, staying.consumed.get(), back.name, back.consumed.get());
            ConsumerGroupDescription description =
                    Checks.get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group),
                            "describeConsumerGroups");
            Map<String, String> instances = new TreeMap<>();
            for (MemberDescription member : description.members()) {
                instances.put(member.groupInstanceId().orElse("(none)"),
                        Context.show(member.assignment().topicPartitions()));
            }
            checkEquals(Map.of(a.name, Context.show(owned.get(a.name)), b.name, Context.show(owned.get(b.name))),
                    instances, "the described members");
            check(ownership.violations.isEmpty(), "a partition owned twice: %s", ownership.violations);
            running.forEach(m -> check(m.errors.isEmpty(), "%s", m.errors));
        } finally {
            for (GroupMember m : running) {
                m.stop(GroupMembershipOperation.LEAVE_GROUP);
            }
        }
    }

    private static GroupMember staticMember(Context ctx, String group, String topic, String instance, String client,
            GroupMember.Ownership ownership, Map<String, AtomicInteger> seen) {
        Map<String, Object> config = memberConfig(group, "range", ctx.name(client));
        config.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        // the member's name is its instance id: the one coming back owns what the one leaving did
        return new GroupMember(instance, ctx.consumer(config), topic, ownership, seen).start();
    }
}
