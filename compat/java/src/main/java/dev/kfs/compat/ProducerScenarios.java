package dev.kfs.compat;

import static dev.kfs.compat.Checks.check;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;

/** The idempotent producer, acks=all, with each compression codec: what it wrote reads back exactly. */
final class ProducerScenarios {
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    static final int RECORDS = 300;
    static final int PARTITIONS = 3;

    private ProducerScenarios() {}

    /** A record as sent, and where the broker said it went. */
    private record Sent(ProducerRecord<byte[], byte[]> record, RecordMetadata metadata) {}

    static void idempotent(Context ctx, String codec) throws Exception {
        String topic = ctx.name("");
        try (Admin admin = ctx.admin()) {
            ctx.step("createTopics");
            ctx.createTopic(admin, topic, PARTITIONS, Map.of());
        }
        List<ProducerRecord<byte[], byte[]>> records = records(topic, codec);
        List<Sent> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = ctx.bytesProducer(Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.LINGER_MS_CONFIG, 5,
                ProducerConfig.BATCH_SIZE_CONFIG, 16_384))) {
            ctx.step("producing " + RECORDS + " records");
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (ProducerRecord<byte[], byte[]> record : records) {
                acks.add(producer.send(record));
            }
            producer.flush();
            for (int i = 0; i < records.size(); i++) {
                sent.add(new Sent(records.get(i), acks.get(i).get()));
            }
        }
        // Per partition, in the order sent: offsets 0, 1, 2, ... (idempotence keeps the order).
        Map<Integer, List<Sent>> byPartition = new HashMap<>();
        for (Sent s : sent) {
            byPartition.computeIfAbsent(s.metadata.partition(), p -> new ArrayList<>()).add(s);
        }
        for (Map.Entry<Integer, List<Sent>> entry : byPartition.entrySet()) {
            List<Sent> list = entry.getValue();
            for (int i = 0; i < list.size(); i++) {
                check(list.get(i).metadata.offset() == i,
                        "partition %d: the record sent %d-th there was acknowledged at offset %d",
                        entry.getKey(), i, list.get(i).metadata.offset());
            }
        }
        check(byPartition.size() == PARTITIONS, "the keys should spread over all %d partitions: %s",
                PARTITIONS, byPartition.keySet());

        ctx.step("reading the records back");
        Map<Integer, List<ConsumerRecord<byte[], byte[]>>> read = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = ctx.bytesConsumer(Map.of())) {
            List<TopicPartition> all = Context.partitions(topic, PARTITIONS);
            consumer.assign(all);
            consumer.seekToBeginning(all);
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            int count = 0;
            while (count < RECORDS && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    read.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r);
                    count++;
                }
            }
            check(count == RECORDS, "read %d of %d records back", count, RECORDS);
        }
        for (Map.Entry<Integer, List<Sent>> entry : byPartition.entrySet()) {
            List<Sent> expected = entry.getValue();
            List<ConsumerRecord<byte[], byte[]>> got = read.getOrDefault(entry.getKey(), List.of());
            check(got.size() == expected.size(), "partition %d: read %d records, sent %d",
                    entry.getKey(), got.size(), expected.size());
            for (int i = 0; i < expected.size(); i++) {
                compare(expected.get(i), got.get(i));
            }
        }
    }

    private static void compare(Sent sent, ConsumerRecord<byte[], byte[]> got) {
        String where = "partition " + got.partition() + " offset " + got.offset();
        check(got.offset() == sent.metadata.offset(), "%s: expected offset %d", where, sent.metadata.offset());
        check(Arrays.equals(got.key(), sent.record.key()), "%s: key %s, sent %s", where,
                text(got.key()), text(sent.record.key()));
        check(Arrays.equals(got.value(), sent.record.value()), "%s: value differs (%s bytes, sent %s)",
                where, got.value() == null ? "null" : got.value().length,
                sent.record.value() == null ? "null" : sent.record.value().length);
        check(got.timestampType() == TimestampType.CREATE_TIME && got.timestamp() == sent.metadata.timestamp(),
                "%s: timestamp %s %d, acknowledged %d", where, got.timestampType(), got.timestamp(),
                sent.metadata.timestamp());
        Header[] want = sent.record.headers().toArray();
        Header[] have = got.headers().toArray();
        check(want.length == have.length, "%s: %d headers, sent %d", where, have.length, want.length);
        for (int h = 0; h < want.length; h++) {
            check(want[h].key().equals(have[h].key()) && Arrays.equals(want[h].value(), have[h].value()),
                    "%s: header %d is %s=%s, sent %s=%s", where, h, have[h].key(), text(have[h].value()),
                    want[h].key(), text(want[h].value()));
        }
    }

    /**
     * Keyed records of every shape: text that compresses, random bytes that do not, an empty
     * value, a null value; headers with text, binary, empty and null values, a repeated key.
     */
    private static List<ProducerRecord<byte[], byte[]>> records(String topic, String codec) {
        Random random = new Random(RECORDS);
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        for (int i = 0; i < RECORDS; i++) {
            byte[] key = ("key-" + i).getBytes(StandardCharsets.UTF_8);
            byte[] value;
            if (i % 50 == 7) {
                value = null;
            } else if (i % 50 == 8) {
                value = new byte[0];
            } else if (i % 2 == 0) {
                value = ("value " + i + " of " + codec + " ").repeat(1 + i % 20).getBytes(StandardCharsets.UTF_8);
            } else {
                value = new byte[random.nextInt(2048)];
                random.nextBytes(value);
            }
            byte[] binary = new byte[8];
            random.nextBytes(binary);
            List<Header> headers = List.of(
                    new RecordHeader("index", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                    new RecordHeader("codec", codec.getBytes(StandardCharsets.UTF_8)),
                    new RecordHeader("binary", binary),
                    new RecordHeader("empty", new byte[0]),
                    new RecordHeader("null", null),
                    new RecordHeader("index", "again".getBytes(StandardCharsets.UTF_8)));
            records.add(new ProducerRecord<>(topic, null, key, value, headers));
        }
        return records;
    }

    private static String text(byte[] bytes) {
        return bytes == null ? "null" : new String(bytes, StandardCharsets.UTF_8);
    }
}
