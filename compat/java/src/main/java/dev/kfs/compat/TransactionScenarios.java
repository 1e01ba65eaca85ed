package dev.kfs.compat;

import static dev.kfs.compat.Checks.check;
import static dev.kfs.compat.Checks.checkEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** A transactional producer and read_committed consumers. */
final class TransactionScenarios {
    static final int PARTITIONS = 2;

    private TransactionScenarios() {}

    /**
     * Commit one transaction, abort one (both with records and a consumer offset,
     * sendOffsetsToTransaction), commit another; then leave one open. read_committed reads exactly the committed
     * records, in order per partition, and stops at the open transaction (its end offset, the last
     * stable offset, is behind read_uncommitted's); read_uncommitted reads the aborted records
     * too; the group's offset is the committed transaction's, not the aborted one's. Once the open
     * transaction commits, read_committed reads it as well.
     */
    @SuppressWarnings("removal") // ConsumerGroupMetadata(groupId): a consumer's groupMetadata() with no member
    static void readCommitted(Context ctx) throws Exception {
        String topic = ctx.name("");
        String group = ctx.name("group");
        TopicPartition offsetsOf = new TopicPartition(ctx.name("input"), 0);
        Map<Integer, List<String>> committed = new HashMap<>();
        Map<Integer, List<String>> all = new HashMap<>();
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of(
                        ProducerConfig.TRANSACTIONAL_ID_CONFIG, ctx.name("txn"),
                        ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30_000))) {
            ctx.createTopic(admin, topic, PARTITIONS, Map.of());
            ctx.createTopic(admin, offsetsOf.topic(), 1, Map.of());
            ctx.step("initTransactions");
            producer.initTransactions();
            ConsumerGroupMetadata groupMetadata = new ConsumerGroupMetadata(group);

            ctx.step("the first transaction");
            transaction(producer, topic, "committed-1", 10, all, committed);
            producer.sendOffsetsToTransaction(Map.of(offsetsOf, new OffsetAndMetadata(5)), groupMetadata);
            producer.commitTransaction();

            ctx.step("the aborted transaction");
            transaction(producer, topic, "aborted", 10, all);
            producer.sendOffsetsToTransaction(Map.of(offsetsOf, new OffsetAndMetadata(9)), groupMetadata);
            producer.flush();
            producer.abortTransaction();

            ctx.step("the second committed transaction");
            transaction(producer, topic, "committed-2", 5, all, committed);
            producer.commitTransaction();

            // commitTransaction returns once the commit is decided; the markers that move the last
            // stable offset may follow (as in Kafka): wait for them before reading
            awaitStable(ctx, topic);

            ctx.step("an open transaction");
            Map<Integer, List<String>> open = new HashMap<>();
            transaction(producer, topic, "open", 3, all, open);
            producer.flush();

            ctx.step("reading read_committed while a transaction is open");
            Map<TopicPartition, Long> stable = new HashMap<>();
            checkEquals(committed, readAll(ctx, topic, "read_committed", stable), "read_committed records");
            Map<TopicPartition, Long> end = new HashMap<>();
            checkEquals(all, readAll(ctx, topic, "read_uncommitted", end), "read_uncommitted records");
            for (TopicPartition tp : Context.partitions(topic, PARTITIONS)) {
                // the open transaction's first record is past the last stable offset
                check(stable.get(tp) < end.get(tp), "%s: the last stable offset %d should be behind the end %d "
                        + "while a transaction is open", tp, stable.get(tp), end.get(tp));
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = Checks.get(
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata(), "listConsumerGroupOffsets");
            checkEquals(5L, offsets.containsKey(offsetsOf) ? offsets.get(offsetsOf).offset() : null,
                    "the group's offset (the committed transaction's 5, not the aborted one's 9)");

            ctx.step("committing the open transaction");
            producer.commitTransaction();
            open.forEach((p, values) -> committed.computeIfAbsent(p, k -> new ArrayList<>()).addAll(values));
            awaitStable(ctx, topic);
            checkEquals(committed, readAll(ctx, topic, "read_committed", new HashMap<>()),
                    "read_committed records after the last commit");
        }
    }

    /** Begins a transaction and sends {@code count} records to it, value i to partition i % 2. */
    @SafeVarargs
    private static void transaction(KafkaProducer<String, String> producer, String topic, String label, int count,
            Map<Integer, List<String>>... expectedIn) {
        producer.beginTransaction();
        for (int i = 0; i < count; i++) {
            String value = label + "-" + i;
            int partition = i % PARTITIONS;
            producer.send(new ProducerRecord<>(topic, partition, "key-" + i, value));
            for (Map<Integer, List<String>> expected : expectedIn) {
                expected.computeIfAbsent(partition, p -> new ArrayList<>()).add(value);
            }
        }
    }

    /** Waits until read_committed's end offsets (the last stable offsets) are the log end's. */
    private static void awaitStable(Context ctx, String topic) throws Exception {
        List<TopicPartition> partitions = Context.partitions(topic, PARTITIONS);
        try (KafkaConsumer<String, String> committed =
                        ctx.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
                KafkaConsumer<String, String> uncommitted =
                        ctx.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted"))) {
            // The log end is read again each time: a marker still on its way moves it too.
            Checks.waitUntil("the last stable offsets to reach the log end", Duration.ofSeconds(10),
                    () -> uncommitted.endOffsets(partitions, Duration.ofSeconds(10))
                            .equals(committed.endOffsets(partitions, Duration.ofSeconds(10))),
                    () -> "last stable offsets " + committed.endOffsets(partitions, Duration.ofSeconds(10))
                            + ", log end " + uncommitted.endOffsets(partitions, Duration.ofSeconds(10)));
        }
    }

    /**
     * The values of every record up to the end offsets (for read_committed: the last stable offsets),
     * by partition; the end offsets go in {@code ends}.
     */
    private static Map<Integer, List<String>> readAll(Context ctx, String topic, String isolation, Map<TopicPartition, Long> ends)
            throws Exception {
        Map<Integer, List<String>> byPartition = new HashMap<>();
        try (KafkaConsumer<String, String> consumer =
                ctx.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> partitions = Context.partitions(topic, PARTITIONS);
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            ends.putAll(consumer.endOffsets(partitions, Duration.ofSeconds(10)));
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                check(System.nanoTime() < deadline, "%s: positions %s never reached the end offsets %s", isolation,
                        positions(consumer, partitions), ends);
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    byPartition.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r.value());
                }
            }
        }
        return byPartition;
    }

    private static Map<TopicPartition, Long> positions(KafkaConsumer<String, String> consumer, List<TopicPartition> tps) {
        Map<TopicPartition, Long> positions = new HashMap<>();
        tps.forEach(tp -> positions.put(tp, consumer.position(tp)));
        return positions;
    }
}
