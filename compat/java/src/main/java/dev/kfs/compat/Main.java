package dev.kfs.compat;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Kafka's Java client against a broker: one line per scenario on stdout, {@code PASS <name>} or
 * {@code FAIL <name>: <reason>}.
 *
 * <pre>
 * java -jar kfs-java-client.jar --bootstrap-server HOST:PORT [--command-config FILE]
 *     [--scenario-timeout-ms MS] [SCENARIO ...]
 * java -jar kfs-java-client.jar --list
 * </pre>
 *
 * <p>{@code --command-config} is a client properties file (as Kafka's tools take it) merged into
 * every producer, consumer and admin client: SASL_SSL, say. Without scenario names every scenario
 * runs, in {@link #SCENARIOS}' order. Each runs on a thread of its own with a deadline: one that
 * throws, or outlives the deadline, is a FAIL line and the next one runs. Topic, group and
 * transactional ids carry a per-run id, so runs can repeat against one broker. The exit code is 0
 * when every scenario passed, 1 when one failed, 2 for a usage error.
 */
public final class Main {
    /** The scenarios, by name, in the order they run; compat/java_client.py describes each. */
    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        for (String codec : ProducerScenarios.CODECS) {
            SCENARIOS.put("producer-idempotent-" + codec, ctx -> ProducerScenarios.idempotent(ctx, codec));
        }
        SCENARIOS.put("consumer-group-range", ctx -> GroupScenarios.rebalance(ctx, "range"));
        SCENARIOS.put(
                "consumer-group-cooperative-sticky", ctx -> GroupScenarios.rebalance(ctx, "cooperative-sticky"));
        SCENARIOS.put("consumer-group-static-member-returns",
                ctx -> GroupScenarios.staticMembership(ctx, "follower"));
        SCENARIOS.put("consumer-group-static-leader-returns", ctx -> GroupScenarios.staticMembership(ctx, "leader"));
        SCENARIOS.put("transactions-read-committed", TransactionScenarios::readCommitted);
        SCENARIOS.put("streams-word-count-exactly-once", StreamsScenarios::wordCountExactlyOnce);
        SCENARIOS.put("admin-topics", AdminScenarios::topics);
        SCENARIOS.put("admin-topic-ids", AdminScenarios::topicIds);
        SCENARIOS.put("admin-configs", AdminScenarios::configs);
        SCENARIOS.put("admin-offsets", AdminScenarios::offsets);
        SCENARIOS.put("admin-consumer-groups", AdminScenarios::consumerGroups);
        SCENARIOS.put("admin-cluster", AdminScenarios::cluster);
        SCENARIOS.put("admin-producers-transactions", AdminScenarios::producersAndTransactions);
    }

    /** One scenario: returns when everything it checks holds, throws otherwise. */
    @FunctionalInterface
    interface Scenario {
        void run(Context ctx) throws Exception;
    }

    private Main() {}

    public static void main(String[] args) throws IOException {
        String bootstrap = null;
        Path commandConfig = null;
        long timeoutMs = 60_000;
        List<String> names = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--list" -> {
                    SCENARIOS.keySet().forEach(System.out::println);
                    return;
                }
                case "--bootstrap-server" -> bootstrap = value(args, ++i);
                case "--command-config" -> commandConfig = Path.of(value(args, ++i));
                case "--scenario-timeout-ms" -> timeoutMs = Long.parseLong(value(args, ++i));
                default -> {
                    if (args[i].startsWith("--")) {
                        usage("unknown option " + args[i]);
                    }
                    names.add(args[i]);
                }
            }
        }
        if (bootstrap == null) {
            usage("--bootstrap-server is required");
        }
        Properties common = new Properties();
        if (commandConfig != null) {
            try (Reader reader = Files.newBufferedReader(commandConfig, StandardCharsets.UTF_8)) {
                common.load(reader);
            }
        }
        if (names.isEmpty()) {
            names.addAll(SCENARIOS.keySet());
        }
        boolean allPassed = true;
        for (String name : names) {
            allPassed &= runOne(name, new Context(bootstrap, common, name), timeoutMs, System.out);
        }
        System.out.flush();
        // A scenario cut off at its deadline may have left threads behind: do not wait for them.
        System.exit(allPassed ? 0 : 1);
    }

    private static boolean runOne(String name, Context ctx, long timeoutMs, PrintStream out) {
        Scenario scenario = SCENARIOS.get(name);
        String failure;
        if (scenario == null) {
            failure = "unknown scenario (--list names them)";
        } else {
            ExecutorService thread = Executors.newSingleThreadExecutor(runnable -> {
                Thread t = new Thread(runnable, "scenario-" + name);
                t.setDaemon(true);
                return t;
            });
            Future<?> done = thread.submit(() -> {
                scenario.run(ctx);
                return null;
            });
            try {
                done.get(timeoutMs, TimeUnit.MILLISECONDS);
                failure = null;
            } catch (TimeoutException e) {
                failure = "did not finish in " + timeoutMs + " ms" + ctx.progress();
            } catch (ExecutionException e) {
                failure = describe(e.getCause());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                failure = "interrupted";
            } finally {
                done.cancel(true);
                thread.shutdownNow();
                ctx.closeAll();
            }
        }
        out.println(failure == null ? "PASS " + name : "FAIL " + name + ": " + failure);
        out.flush();
        return failure == null;
    }

    /** An exception as one line: its class and message, and its causes'. */
    static String describe(Throwable error) {
        StringBuilder line = new StringBuilder();
        for (Throwable e = error; e != null; e = e.getCause()) {
            if (e instanceof ExecutionException && e.getCause() != null) {
                continue; // a future's wrapper says nothing its cause does not
            }
            if (line.length() > 0) {
                line.append(" <- ");
            }
            line.append(e instanceof Checks.Failed ? "" : e.getClass().getSimpleName() + ": ");
            line.append(e.getMessage());
            if (e.getCause() == e) {
                break;
            }
        }
        return line.toString().replaceAll("\\s+", " ").strip();
    }

    private static String value(String[] args, int i) {
        if (i >= args.length) {
            usage(args[i - 1] + " needs a value");
        }
        return args[i];
    }

    private static void usage(String problem) {
        System.err.println("kfs-java-client: " + problem);
        System.err.println(
                "usage: --bootstrap-server HOST:PORT [--command-config FILE] [--scenario-timeout-ms MS]"
                        + " [SCENARIO ...] | --list");
        System.exit(2);
    }
}
