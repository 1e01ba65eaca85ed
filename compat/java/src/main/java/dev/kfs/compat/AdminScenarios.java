package dev.kfs.compat;

import static dev.kfs.compat.Checks.check;
import static dev.kfs.compat.Checks.checkEquals;
import static dev.kfs.compat.Checks.failsWith;
import static dev.kfs.compat.Checks.get;
import static dev.kfs.compat.Checks.waitUntil;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownMemberIdException;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

/** The Admin API, one scenario per area, each answer checked against what was done before it. */
final class AdminScenarios {
    private AdminScenarios() {}

    /**
     * createTopics with configs (and again: TopicExistsException), listTopics, describeTopics
     * (partitions, leaders, the topic id createTopics returned), createPartitions (up: the new count
     * described; down: InvalidPartitionsException), deleteTopics (gone from the list, describe says
     * UnknownTopicOrPartitionException).
     */
    static void topics(Context ctx) throws Exception {
        String topic = ctx.name("");
        try (Admin admin = ctx.admin()) {
            ctx.step("createTopics");
            NewTopic spec = new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "max.message.bytes", "200000"));
            CreateTopicsResult created = admin.createTopics(List.of(spec));
            get(created.all(), "createTopics");
            checkEquals(3, get(created.numPartitions(topic), "createTopics numPartitions"), "partitions created");
            checkEquals(1, get(created.replicationFactor(topic), "createTopics replicationFactor"),
                    "replication factor created");
            Uuid id = get(created.topicId(topic), "createTopics topicId");
            check(id != null && !id.equals(Uuid.ZERO_UUID), "createTopics: topic id %s", id);
            Config config = get(created.config(topic), "createTopics config");
            checkEquals("3600000", value(config, "retention.ms"), "createTopics' retention.ms");
            checkEquals("200000", value(config, "max.message.bytes"), "createTopics' max.message.bytes");
            failsWith(admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all(), TopicExistsException.class,
                    "createTopics of an existing topic");

            ctx.step("listTopics");
            Set<String> names = get(admin.listTopics().names(), "listTopics");
            check(names.contains(topic), "listTopics does not list %s", topic);

            ctx.step("describeTopics");
            TopicDescription description = describe(admin, topic);
            checkEquals(id, description.topicId(), "described topic id");
            check(!description.isInternal(), "%s described as internal", topic);
            checkEquals(3, description.partitions().size(), "described partitions");
            for (TopicPartitionInfo p : description.partitions()) {
                check(p.leader() != null && p.replicas().size() == 1 && p.isr().size() == 1,
                        "partition %d: leader %s, replicas %s, isr %s", p.partition(), p.leader(), p.replicas(), p.isr());
            }

            ctx.step("createPartitions");
            get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all(), "createPartitions to 5");
            waitUntil("5 partitions described", Duration.ofSeconds(10), () -> describeQuietly(admin, topic) == 5);
            failsWith(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all(),
                    InvalidPartitionsException.class, "createPartitions down to 4");

            ctx.step("deleteTopics");
            get(admin.deleteTopics(List.of(topic)).all(), "deleteTopics");
            waitUntil("the deleted topic to leave listTopics", Duration.ofSeconds(10),
                    () -> !listQuietly(admin).contains(topic));
            failsWith(admin.describeTopics(List.of(topic)).allTopicNames(), UnknownTopicOrPartitionException.class,
                    "describeTopics of the deleted topic");
        }
    }

    /**
     * Topics named by id (KIP-516): describeTopics and deleteTopics of a
     * TopicCollection.ofTopicIds, which send Metadata v10+ and DeleteTopics v6+ with the id and no
     * name. describeTopics names the topic createTopics returned the id of, with its partitions;
     * deleteTopics by id deletes it; a second describe by id is UnknownTopicIdException. Each
     * check runs even if one before it failed; the failures are reported together.
     */
    static void topicIds(Context ctx) throws Exception {
        String topic = ctx.name("");
        List<String> failures = new ArrayList<>();
        try (Admin admin = ctx.admin()) {
            CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)));
            get(created.all(), "createTopics");
            Uuid id = get(created.topicId(topic), "createTopics topicId");
            ctx.step("describeTopics by id");
            try {
                TopicDescription byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                        .allTopicIds(), "describeTopics by id").get(id);
                check(byId != null && topic.equals(byId.name()) && byId.partitions().size() == 2,
                        "describeTopics by id: %s", byId);
            } catch (Checks.Failed e) {
                failures.add(Main.describe(e));
            }
            ctx.step("deleteTopics by id");
            try {
                get(admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all(), "deleteTopics by id");
                waitUntil("the topic deleted by id to leave listTopics", Duration.ofSeconds(10),
                        () -> !listQuietly(admin).contains(topic));
                failsWith(admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds(),
                        UnknownTopicIdException.class, "describeTopics by the id of a deleted topic");
            } catch (Checks.Failed e) {
                failures.add(Main.describe(e));
            }
        }
        check(failures.isEmpty(), "%s", String.join("; ", failures));
    }

    private static TopicDescription describe(Admin admin, String topic) throws InterruptedException {
        return get(admin.describeTopics(List.of(topic)).allTopicNames(), "describeTopics").get(topic);
    }

    private static int describeQuietly(Admin admin, String topic) {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        } catch (InterruptedException | ExecutionException e) {
            return -1;
        }
    }

    private static Set<String> listQuietly(Admin admin) {
        try {
            return admin.listTopics().names().get();
        } catch (InterruptedException | ExecutionException e) {
            return Set.of();
        }
    }

    private static String value(Config config, String name) {
        ConfigEntry entry = config.get(name);
        return entry == null ? null : entry.value();
    }

    /**
     * describeConfigs of a topic (its overrides as DYNAMIC_TOPIC_CONFIG, the rest present as
     * defaults) and of the broker; incrementalAlterConfigs SET, DELETE and APPEND (a list config),
     * each visible in the next describe; an out-of-range value and an unknown name are
     * InvalidConfigurationException (nothing applied).
     */
    static void configs(Context ctx) throws Exception {
        String topic = ctx.name("");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = ctx.admin()) {
            ctx.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            ctx.step("describeConfigs");
            Config before = topicConfig(admin, resource);
            ConfigEntry retention = before.get("retention.ms");
            check(retention != null && "3600000".equals(retention.value())
                            && retention.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "retention.ms described as %s", retention);
            for (String name : List.of("segment.bytes", "segment.ms", "min.insync.replicas", "compression.type",
                    "max.message.bytes", "message.timestamp.type")) {
                ConfigEntry entry = before.get(name);
                check(entry != null && entry.value() != null, "describeConfigs lacks %s", name);
                check(entry.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                        "%s described as a topic override: %s", name, entry);
            }

            ctx.step("incrementalAlterConfigs");
            get(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("segment.ms", "600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                    .all(), "incrementalAlterConfigs");
            Config after = topicConfig(admin, resource);
            checkEquals("600000", value(after, "segment.ms"), "segment.ms after SET");
            check(after.get("segment.ms").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "segment.ms after SET: %s", after.get("segment.ms"));
            check(after.get("retention.ms").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG
                            && !"3600000".equals(value(after, "retention.ms")),
                    "retention.ms after DELETE: %s", after.get("retention.ms"));
            checkEquals(Set.of("delete", "compact"), Set.of(value(after, "cleanup.policy").split(",")),
                    "cleanup.policy after APPEND compact");

            ctx.step("invalid configs");
            failsWith(admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                            new ConfigEntry("min.cleanable.dirty.ratio", "2"), AlterConfigOp.OpType.SET)))).all(),
                    InvalidConfigurationException.class, "min.cleanable.dirty.ratio=2");
            failsWith(admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                            new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all(),
                    InvalidConfigurationException.class, "an unknown topic config");
            checkEquals("600000", value(topicConfig(admin, resource), "segment.ms"),
                    "segment.ms after the failed alters");

            ctx.step("describeConfigs of the broker");
            Node node = get(admin.describeCluster().nodes(), "describeCluster").iterator().next();
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
            Config brokerConfig = get(admin.describeConfigs(List.of(broker)).all(), "describeConfigs broker").get(broker);
            check(value(brokerConfig, "message.max.bytes") != null, "the broker's message.max.bytes not described");
        }
    }

    private static Config topicConfig(Admin admin, ConfigResource resource) throws InterruptedException {
        return get(admin.describeConfigs(List.of(resource)).all(), "describeConfigs").get(resource);
    }

    /**
     * listOffsets with each spec over six records with out-of-order timestamps (the largest is the
     * third record's): earliest 0, latest 6, maxTimestamp the third record (offset 2 and its
     * timestamp), forTimestamp the first record at or after the time (or -1 past them all);
     * deleteRecords moves the low watermark and earliest to 3, and deleting past the end is
     * OffsetOutOfRangeException.
     */
    static void offsets(Context ctx) throws Exception {
        String topic = ctx.name("");
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - 60_000;
        long[] timestamps = {base, base + 1_000, base + 5_000, base + 2_000, base + 3_000, base + 4_000};
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 100))) {
            ctx.createTopic(admin, topic, 1, Map.of());
            for (int i = 0; i < timestamps.length; i++) {
                producer.send(new ProducerRecord<>(topic, 0, timestamps[i], "key-" + i, "value-" + i));
            }
            producer.flush();

            ctx.step("listOffsets");
            checkOffset(admin, tp, OffsetSpec.earliest(), 0, null, "earliest");
            checkOffset(admin, tp, OffsetSpec.latest(), 6, null, "latest");
            checkOffset(admin, tp, OffsetSpec.maxTimestamp(), 2, base + 5_000, "maxTimestamp");
            checkOffset(admin, tp, OffsetSpec.forTimestamp(base - 1), 0, base, "forTimestamp before every record");
            checkOffset(admin, tp, OffsetSpec.forTimestamp(base + 500), 1, base + 1_000, "forTimestamp(base+500)");
            checkOffset(admin, tp, OffsetSpec.forTimestamp(base + 4_500), 2, base + 5_000, "forTimestamp(base+4500)");
            checkOffset(admin, tp, OffsetSpec.forTimestamp(base + 10_000), -1, -1L, "forTimestamp after every record");

            ctx.step("deleteRecords");
            long low = get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(tp),
                    "deleteRecords").lowWatermark();
            checkEquals(3L, low, "the low watermark after deleteRecords before 3");
            checkOffset(admin, tp, OffsetSpec.earliest(), 3, null, "earliest after deleteRecords");
            checkOffset(admin, tp, OffsetSpec.latest(), 6, null, "latest after deleteRecords");
            failsWith(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(100))).all(),
                    OffsetOutOfRangeException.class, "deleteRecords past the end");
            try (KafkaConsumer<String, String> consumer = ctx.consumer(Map.of())) {
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                List<Long> read = new ArrayList<>();
                long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
                while (read.size() < 3 && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        read.add(r.offset());
                    }
                }
                checkEquals(List.of(3L, 4L, 5L), read, "the offsets read from the beginning after deleteRecords");
            }
        }
    }

    private static void checkOffset(Admin admin, TopicPartition tp, OffsetSpec spec, long offset, Long timestamp,
            String what) throws InterruptedException {
        ListOffsetsResultInfo info = get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp), "listOffsets " + what);
        check(info.offset() == offset && (timestamp == null || info.timestamp() == timestamp),
                "listOffsets %s: offset %d timestamp %d, expected offset %d%s", what, info.offset(), info.timestamp(),
                offset, timestamp == null ? "" : " timestamp " + timestamp);
    }

    /**
     * A group with one member: listConsumerGroups lists it, describeConsumerGroups shows it Stable
     * with the member, its client id and both partitions; deleteConsumerGroups is
     * GroupNotEmptyException and alterConsumerGroupOffsets UnknownMemberIdException while the member
     * is in it. Once it leaves: Empty; listConsumerGroupOffsets gives the committed offsets;
     * alterConsumerGroupOffsets changes one; deleteConsumerGroups removes the group (unlisted,
     * described Dead or GroupIdNotFoundException, its offsets gone) and a second delete is
     * GroupIdNotFoundException.
     */
    static void consumerGroups(Context ctx) throws Exception {
        String topic = ctx.name("");
        String group = ctx.name("group");
        List<TopicPartition> partitions = Context.partitions(topic, 2);
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of())) {
            ctx.createTopic(admin, topic, 2, Map.of());
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, "key-" + i, "value-" + i));
            }
            producer.flush();
            String clientId = ctx.name("member");
            Map<TopicPartition, OffsetAndMetadata> committed = new HashMap<>();
            try (KafkaConsumer<String, String> consumer = ctx.consumer(Map.of(
                    ConsumerConfig.GROUP_ID_CONFIG, group, ConsumerConfig.CLIENT_ID_CONFIG, clientId))) {
                ctx.step("consuming in the group");
                consumer.subscribe(List.of(topic));
                int read = 0;
                long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
                while (read < 10 && System.nanoTime() < deadline) {
                    read += consumer.poll(Duration.ofMillis(200)).count();
                }
                checkEquals(10, read, "records consumed");
                consumer.commitSync();
                partitions.forEach(tp -> committed.put(tp, new OffsetAndMetadata(5)));

                ctx.step("listConsumerGroups with a member");
                @SuppressWarnings("removal")
                ConsumerGroupListing listing = listing(admin, group)
                        .orElseThrow(() -> new Checks.Failed("listConsumerGroups does not list " + group));
                check(!listing.isSimpleConsumerGroup(), "listed as a simple group: %s", listing);
                checkEquals(Optional.of(GroupState.STABLE), listing.groupState(), "the listed state");

                ctx.step("describeConsumerGroups with a member");
                ConsumerGroupDescription description = describeGroup(admin, group);
                checkEquals(GroupState.STABLE, description.groupState(), "the described state");
                checkEquals("range", description.partitionAssignor(), "the described assignor");
                check(description.coordinator() != null, "no coordinator described");
                checkEquals(1, description.members().size(), "described members");
                MemberDescription member = description.members().iterator().next();
                checkEquals(clientId, member.clientId(), "the member's client id");
                checkEquals(new HashSet<>(partitions), member.assignment().topicPartitions(), "the member's assignment");

                ctx.step("deleting and altering a group in use");
                failsWith(admin.deleteConsumerGroups(List.of(group)).all(), GroupNotEmptyException.class,
                        "deleteConsumerGroups of a group with a member");
                failsWith(admin.alterConsumerGroupOffsets(group, Map.of(partitions.get(0), new OffsetAndMetadata(1))).all(),
                        UnknownMemberIdException.class, "alterConsumerGroupOffsets of a group with a member");
            }

            ctx.step("describeConsumerGroups once empty");
            waitUntil("the group to be Empty", Duration.ofSeconds(10),
                    () -> describeGroupQuietly(admin, group).map(ConsumerGroupDescription::groupState).orElse(null)
                            == GroupState.EMPTY,
                    () -> describeGroupQuietly(admin, group).toString());
            checkEquals(0, describeGroup(admin, group).members().size(), "members of the empty group");

            ctx.step("listConsumerGroupOffsets");
            checkEquals(committed, groupOffsets(admin, group), "the committed offsets");

            ctx.step("alterConsumerGroupOffsets");
            get(admin.alterConsumerGroupOffsets(group, Map.of(partitions.get(0), new OffsetAndMetadata(1, "moved")))
                    .all(), "alterConsumerGroupOffsets");
            Map<TopicPartition, OffsetAndMetadata> altered = groupOffsets(admin, group);
            checkEquals(1L, altered.get(partitions.get(0)).offset(), "the altered offset");
            checkEquals("moved", altered.get(partitions.get(0)).metadata(), "the altered offset's metadata");
            checkEquals(5L, altered.get(partitions.get(1)).offset(), "the offset not altered");

            ctx.step("deleteConsumerGroups");
            get(admin.deleteConsumerGroups(List.of(group)).all(), "deleteConsumerGroups");
            check(listing(admin, group).isEmpty(), "listConsumerGroups still lists the deleted group");
            try {
                ConsumerGroupDescription gone = describeGroup(admin, group);
                checkEquals(GroupState.DEAD, gone.groupState(), "the deleted group's state");
            } catch (Checks.Failed e) {
                check(e.getCause() instanceof GroupIdNotFoundException, "describing the deleted group: %s",
                        Main.describe(e));
            }
            try {
                Map<TopicPartition, OffsetAndMetadata> left = groupOffsets(admin, group);
                check(left.isEmpty(), "the deleted group's offsets: %s", left);
            } catch (Checks.Failed e) {
                check(e.getCause() instanceof GroupIdNotFoundException, "the deleted group's offsets: %s",
                        Main.describe(e));
            }
            failsWith(admin.deleteConsumerGroups(List.of(group)).all(), GroupIdNotFoundException.class,
                    "deleteConsumerGroups of a deleted group");
        }
    }

    @SuppressWarnings("removal") // listConsumerGroups (KIP-1043 makes listGroups its successor) is still in 4.x
    private static Optional<ConsumerGroupListing> listing(Admin admin, String group) throws InterruptedException {
        Collection<ConsumerGroupListing> all = get(admin.listConsumerGroups().all(), "listConsumerGroups");
        return all.stream().filter(g -> g.groupId().equals(group)).findFirst();
    }

    private static ConsumerGroupDescription describeGroup(Admin admin, String group) throws InterruptedException {
        return get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group), "describeConsumerGroups");
    }

    private static Optional<ConsumerGroupDescription> describeGroupQuietly(Admin admin, String group) {
        try {
            return Optional.of(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get());
        } catch (InterruptedException | ExecutionException e) {
            return Optional.empty();
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> groupOffsets(Admin admin, String group)
            throws InterruptedException {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        // listConsumerGroupOffsets may name a partition with a null offset: "none committed"
        get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata(), "listConsumerGroupOffsets")
                .forEach((tp, o) -> {
                    if (o != null) {
                        offsets.put(tp, new OffsetAndMetadata(o.offset(), o.metadata()));
                    }
                });
        return offsets;
    }

    /**
     * describeCluster: a cluster id, at least one node with a host and port, the node answering
     * among them; describeLogDirs of every node: a log dir holds the topic's partitions, the one
     * written to with a size above zero.
     */
    static void cluster(Context ctx) throws Exception {
        String topic = ctx.name("");
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> producer = ctx.producer(Map.of())) {
            ctx.createTopic(admin, topic, 2, Map.of());
            for (int i = 0; i < 20; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i));
            }
            producer.flush();

            ctx.step("describeCluster");
            DescribeClusterResult cluster = admin.describeCluster();
            String clusterId = get(cluster.clusterId(), "describeCluster clusterId");
            check(clusterId != null && !clusterId.isEmpty(), "cluster id %s", clusterId);
            Collection<Node> nodes = get(cluster.nodes(), "describeCluster nodes");
            check(!nodes.isEmpty(), "describeCluster: no nodes");
            for (Node node : nodes) {
                check(node.id() >= 0 && !node.host().isEmpty() && node.port() > 0, "describeCluster node %s", node);
            }
            String bootstrapPort = ctx.bootstrap.substring(ctx.bootstrap.lastIndexOf(':') + 1);
            check(nodes.stream().anyMatch(n -> Integer.toString(n.port()).equals(bootstrapPort)),
                    "describeCluster: no node on the bootstrap's port %s: %s", bootstrapPort, nodes);

            ctx.step("describeLogDirs");
            List<Integer> ids = nodes.stream().map(Node::id).toList();
            Map<Integer, Map<String, LogDirDescription>> dirs =
                    get(admin.describeLogDirs(ids).allDescriptions(), "describeLogDirs");
            Map<TopicPartition, ReplicaInfo> replicas = new HashMap<>();
            for (Map<String, LogDirDescription> byPath : dirs.values()) {
                for (LogDirDescription dir : byPath.values()) {
                    check(dir.error() == null, "log dir error %s", dir.error());
                    replicas.putAll(dir.replicaInfos());
                }
            }
            TopicPartition written = new TopicPartition(topic, 0);
            TopicPartition empty = new TopicPartition(topic, 1);
            check(replicas.containsKey(written) && replicas.containsKey(empty),
                    "describeLogDirs lacks the topic's partitions: %s",
                    replicas.keySet().stream().filter(tp -> tp.topic().equals(topic)).toList());
            check(replicas.get(written).size() > 0, "describeLogDirs: %s (20 records) has size %d", written,
                    replicas.get(written).size());
            check(replicas.get(empty).size() >= 0, "describeLogDirs: %s has size %d", empty,
                    replicas.get(empty).size());
        }
    }

    /**
     * describeProducers of a partition an idempotent producer wrote five records to (its last
     * sequence 4, no transaction), and then a transactional producer with an open transaction too
     * (its transaction's first offset 5); listTransactions lists that transactional id Ongoing (also
     * when filtered by state), describeTransactions shows the partition in it; after the commit,
     * listTransactions says CompleteCommit and describeProducers shows no open transaction.
     */
    static void producersAndTransactions(Context ctx) throws Exception {
        String topic = ctx.name("");
        String transactionalId = ctx.name("txn");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = ctx.admin();
                KafkaProducer<String, String> idempotent =
                        ctx.producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true));
                KafkaProducer<String, String> transactional = ctx.producer(Map.of(
                        ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId,
                        ProducerConfig.CLIENT_ID_CONFIG, ctx.name("txn-producer")))) {
            ctx.createTopic(admin, topic, 1, Map.of());
            for (int i = 0; i < 5; i++) {
                idempotent.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i)).get();
            }

            ctx.step("describeProducers, one idempotent producer");
            List<ProducerState> producers = producers(admin, tp);
            checkEquals(1, producers.size(), "producers of the partition");
            ProducerState first = producers.get(0);
            check(first.producerId() >= 0 && first.producerEpoch() >= 0 && first.lastSequence() == 4
                            && first.currentTransactionStartOffset().isEmpty() && first.lastTimestamp() > 0,
                    "the idempotent producer: %s", first);

            ctx.step("a transaction open");
            transactional.initTransactions();
            transactional.beginTransaction();
            for (int i = 0; i < 3; i++) {
                transactional.send(new ProducerRecord<>(topic, 0, "txn-" + i, "txn-value-" + i));
            }
            transactional.flush();
            producers = producers(admin, tp);
            checkEquals(2, producers.size(), "producers of the partition with a transaction open");
            ProducerState inTransaction = producers.stream().filter(p -> p.producerId() != first.producerId())
                    .findFirst().orElseThrow();
            checkEquals(5L, inTransaction.currentTransactionStartOffset().orElse(-1),
                    "the open transaction's first offset");

            ctx.step("listTransactions, describeTransactions");
            TransactionListing listed = transaction(admin, transactionalId, Set.of())
                    .orElseThrow(() -> new Checks.Failed("listTransactions does not list " + transactionalId));
            checkEquals(TransactionState.ONGOING, listed.state(), "the listed transaction's state");
            checkEquals(inTransaction.producerId(), listed.producerId(), "the listed transaction's producer id");
            check(transaction(admin, transactionalId, Set.of(TransactionState.ONGOING)).isPresent(),
                    "listTransactions filtered by Ongoing does not list %s", transactionalId);
            check(transaction(admin, transactionalId, Set.of(TransactionState.COMPLETE_COMMIT)).isEmpty(),
                    "listTransactions filtered by CompleteCommit lists the open %s", transactionalId);
            TransactionDescription described = get(admin.describeTransactions(List.of(transactionalId))
                    .description(transactionalId), "describeTransactions");
            checkEquals(TransactionState.ONGOING, described.state(), "the described transaction's state");
            checkEquals(Set.of(tp), described.topicPartitions(), "the described transaction's partitions");
            check(described.transactionStartTimeMs().isPresent(), "no start time described: %s", described);

            ctx.step("after the commit");
            transactional.commitTransaction();
            waitUntil("listTransactions to say CompleteCommit", Duration.ofSeconds(10),
                    () -> transactionQuietly(admin, transactionalId)
                            .map(t -> t.state() == TransactionState.COMPLETE_COMMIT).orElse(false),
                    () -> transactionQuietly(admin, transactionalId).toString());
            waitUntil("describeProducers to show no open transaction", Duration.ofSeconds(10), () -> {
                try {
                    return producers(admin, tp).stream().allMatch(p -> p.currentTransactionStartOffset().isEmpty());
                } catch (InterruptedException e) {
                    return false;
                }
            });
        }
    }

    private static List<ProducerState> producers(Admin admin, TopicPartition tp) throws InterruptedException {
        return get(admin.describeProducers(List.of(tp)).partitionResult(tp), "describeProducers").activeProducers();
    }

    private static Optional<TransactionListing> transaction(Admin admin, String id, Set<TransactionState> states)
            throws InterruptedException {
        ListTransactionsOptions options = new ListTransactionsOptions();
        if (!states.isEmpty()) {
            options.filterStates(states);
        }
        return get(admin.listTransactions(options).all(), "listTransactions").stream()
                .filter(t -> t.transactionalId().equals(id)).findFirst();
    }

    private static Optional<TransactionListing> transactionQuietly(Admin admin, String id) {
        try {
            return transaction(admin, id, Set.of());
        } catch (InterruptedException | RuntimeException e) {
            return Optional.empty();
        }
    }
}
