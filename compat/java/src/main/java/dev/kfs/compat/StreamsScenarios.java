package dev.kfs.compat;

import static dev.kfs.compat.Checks.checkEquals;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/** A Kafka Streams application on the broker with {@code processing.guarantee=exactly_once_v2}. */
final class StreamsScenarios {
    static final int PARTITIONS = 2;
    static final List<String> WORDS = List.of("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta");
    static final int SENTENCES = 200;
    static final Duration DEADLINE = Duration.ofSeconds(45);

    private StreamsScenarios() {}

    /**
     * Word count, exactly once: sentences go to a two-partition input topic; the application splits
     * them, re-keys each word through a repartition topic, counts in a state store backed by a
     * compacted changelog topic, and writes every new count to an output topic, all in one
     * transaction per commit. Half the sentences are counted by a first instance, which then closes;
     * the rest by a second instance of the same application with an empty state directory, which
     * must restore the counts from the changelog. A read_committed read of the output ends, for
     * each word, at exactly the number of times it was sent: a record processed twice (or lost)
     * would show.
     */
    static void wordCountExactlyOnce(Context ctx) throws Exception {
        String input = ctx.name("sentences");
        String output = ctx.name("counts");
        Map<String, Long> expected = new TreeMap<>();
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer =
                        ctx.producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true))) {
            ctx.createTopic(admin, input, PARTITIONS, Map.of());
            ctx.createTopic(admin, output, PARTITIONS, Map.of());
            ctx.step("the first half of the sentences");
            send(producer, input, 0, SENTENCES / 2, expected);
            runUntilCounted(ctx, output, expected, "the first instance");
            ctx.step("the second half of the sentences");
            send(producer, input, SENTENCES / 2, SENTENCES, expected);
            runUntilCounted(ctx, output, expected, "the second instance, restoring from the changelog");
        }
    }

    /** Sentence i has words i % 7, (i / 7) % 7 and 3: their counts go into {@code expected}. */
    private static void send(KafkaProducer<String, String> producer, String topic, int from, int to,
            Map<String, Long> expected) throws Exception {
        for (int i = from; i < to; i++) {
            List<String> words = List.of(WORDS.get(i % 7), WORDS.get((i / 7) % 7), WORDS.get(3));
            for (String word : words) {
                expected.merge(word, 1L, Long::sum);
            }
            producer.send(new ProducerRecord<>(topic, "s-" + i, String.join(" ", words))).get();
        }
    }

    /** Starts an instance on a fresh state directory, waits for the counts, and closes it. */
    private static void runUntilCounted(Context ctx, String output, Map<String, Long> expected, String which)
            throws Exception {
        Path stateDir = Files.createTempDirectory("kfs-streams-");
        ctx.step("starting " + which);
        KafkaStreams streams = new KafkaStreams(topology(ctx.name("sentences"), output), config(ctx, stateDir));
        ctx.remember(() -> streams.close(Duration.ZERO));
        Map<String, Long> counted = new TreeMap<>();
        try {
            streams.start();
            ctx.step(which + ": reading the counts read_committed");
            try (KafkaConsumer<String, Long> consumer = new KafkaConsumer<>(consumerConfig(ctx),
                    new StringDeserializer(), new LongDeserializer())) {
                consumer.subscribe(List.of(output));
                Checks.waitUntil(which + " to count every word", DEADLINE, () -> {
                    for (ConsumerRecord<String, Long> record : consumer.poll(Duration.ofMillis(200))) {
                        counted.put(record.key(), record.value());
                    }
                    if (streams.state() == KafkaStreams.State.ERROR) {
                        throw new Checks.Failed(which + " went into state ERROR");
                    }
                    return counted.equals(expected);
                }, () -> "counted " + counted + ", expected " + expected + ", streams " + streams.state());
            }
        } finally {
            ctx.step("closing " + which);
            streams.close(Duration.ofSeconds(20));
            deleteTree(stateDir);
        }
        checkEquals(expected, counted, which + ": the counts read_committed");
    }

    private static Properties config(Context ctx, Path stateDir) {
        Properties props = new Properties();
        props.putAll(ctx.commonConfig());
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, ctx.name("app"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, ctx.bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // A closing instance does not leave its group (Streams' way): the next one's rebalance
        // waits for its session to expire, 45 s by default.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6_000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1_000);
        return props;
    }

    private static Properties consumerConfig(Context ctx) {
        Properties props = new Properties();
        props.putAll(ctx.commonConfig());
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, ctx.bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, ctx.name("reader-" + System.nanoTime()));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        return props;
    }

    /** Split, re-key by word (a repartition topic), count (a changelog topic), emit each new count. */
    private static Topology topology(String input, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(sentence -> Arrays.asList(sentence.split(" ")))
                .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    private static void deleteTree(Path root) throws IOException {
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(path);
            }
        }
    }
}
