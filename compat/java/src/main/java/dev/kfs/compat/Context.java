package dev.kfs.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * What a scenario needs: the broker, clients configured for it, names unique to this run, and a
 * note of the step it is at (a scenario cut off at its deadline reports it).
 *
 * <p>Every client made here is remembered: {@link #closeAll} closes the producers and admin
 * clients a scenario left open, and wakes its consumers (which only their own thread may close),
 * once the scenario has ended or been cut off.
 */
final class Context {
    /** Base 36 time and randomness: the names of one run differ from every earlier run's. */
    static final String RUN_ID = Long.toString(System.currentTimeMillis(), 36)
            + Integer.toString(ThreadLocalRandom.current().nextInt(36 * 36), 36);

    final String bootstrap;
    private final Properties common;
    private final String scenario;
    private final List<Runnable> aborts = new ArrayList<>();
    private volatile String step = "";

    Context(String bootstrap, Properties common, String scenario) {
        this.bootstrap = bootstrap;
        this.common = common;
        this.scenario = scenario;
    }

    /** The properties every client of the run shares ({@code --command-config}: SASL_SSL, say). */
    Properties commonConfig() {
        Properties props = new Properties();
        props.putAll(common);
        return props;
    }

    /** A topic, group or transactional id of this scenario in this run. */
    String name(String what) {
        return "jc-" + RUN_ID + "-" + scenario + (what.isEmpty() ? "" : "-" + what);
    }

    void step(String what) {
        step = what;
    }

    String progress() {
        return step.isEmpty() ? "" : " (at: " + step + ")";
    }

    private Properties config(Map<String, Object> overrides) {
        Properties props = new Properties();
        props.putAll(common);
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        props.putAll(overrides);
        return props;
    }

    Admin admin() {
        Admin admin = Admin.create(config(Map.of(AdminClientConfig.CLIENT_ID_CONFIG, name("admin"))));
        remember(() -> admin.close(Duration.ZERO));
        return admin;
    }

    KafkaProducer<String, String> producer(Map<String, Object> overrides) {
        Properties props = producerConfig(overrides);
        KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
        remember(() -> producer.close(Duration.ZERO));
        return producer;
    }

    KafkaProducer<byte[], byte[]> bytesProducer(Map<String, Object> overrides) {
        Properties props = producerConfig(overrides);
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        remember(() -> producer.close(Duration.ZERO));
        return producer;
    }

    private Properties producerConfig(Map<String, Object> overrides) {
        Properties props = config(Map.of(
                ProducerConfig.CLIENT_ID_CONFIG, name("producer"),
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30_000,
                ProducerConfig.MAX_BLOCK_MS_CONFIG, 20_000));
        props.putAll(overrides);
        return props;
    }

    KafkaConsumer<String, String> consumer(Map<String, Object> overrides) {
        Properties props = consumerConfig(overrides);
        KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        remember(consumer::wakeup);
        return consumer;
    }

    KafkaConsumer<byte[], byte[]> bytesConsumer(Map<String, Object> overrides) {
        Properties props = consumerConfig(overrides);
        KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        remember(consumer::wakeup);
        return consumer;
    }

    private Properties consumerConfig(Map<String, Object> overrides) {
        Properties props = config(Map.of(
                ConsumerConfig.CLIENT_ID_CONFIG, name("consumer"),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false));
        props.putAll(overrides);
        return props;
    }

    /** Creates a topic, with {@code configs} as its overrides, and returns once it is created. */
    void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs)
            throws Exception {
        step("createTopics " + topic);
        NewTopic spec = new NewTopic(topic, partitions, (short) 1).configs(configs);
        Checks.get(admin.createTopics(List.of(spec)).all(), "createTopics " + topic);
    }

    static List<TopicPartition> partitions(String topic, int count) {
        List<TopicPartition> all = new ArrayList<>();
        for (int p = 0; p < count; p++) {
            all.add(new TopicPartition(topic, p));
        }
        return all;
    }

    static String show(Collection<TopicPartition> partitions) {
        return partitions.stream().map(tp -> Integer.toString(tp.partition())).sorted().toList().toString();
    }

    synchronized void remember(Runnable abort) {
        aborts.add(abort);
    }

    synchronized void closeAll() {
        for (Runnable abort : aborts) {
            try {
                abort.run();
            } catch (RuntimeException ignored) {
                // already closed, or closing: either way it is going
            }
        }
        aborts.clear();
    }
}
