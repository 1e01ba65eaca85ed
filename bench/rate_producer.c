/*
 * A rate-limited librdkafka producer for bench.produce_cpu's half-load rows.
 *
 *     rate-producer BOOTSTRAP TOPIC PARTITIONS BYTES_PER_SECOND SECONDS
 *
 * Sends 1 KiB values round-robin over PARTITIONS at a fixed rate (acks=all,
 * linger.ms 5, batch.size 1 MB, no compression: what kcat is told in the
 * saturation rows) and times every message as librdkafka does
 * (rd_kafka_message_latency: from produce() to the acknowledgement, linger
 * and the client's queue included).  A thread of its own serves the delivery
 * reports as librdkafka queues them, so a report does not wait for the
 * sending loop's next 1 ms tick (that wait was in every figure, up to 1 ms).
 * A Python producer doing this needs half a core of a 2-core machine at
 * 170 MB/s; this one needs a few per cent, so the daemon under test has the
 * machine to itself.
 *
 * Prints one JSON object per line on stdout: librdkafka's statistics, once a
 * second, then the result: {"sent": N, "latencies_us": [...], "sched_ns":
 * [ran, waited]} (this process's threads, from /proc/self/task/N/schedstat),
 * "stats_write_max_us": the longest write of a statistics line, which holds
 * up the delivery reports behind it.
 * A rate above what the broker takes makes it send as fast as the broker acknowledges,
 * until SECONDS have passed.
 * Exits 1 with a message on stderr when a delivery failed.
 */
#include <dirent.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VALUE_BYTES 1024
#define TICK_NS 1000000L /* what falls due meanwhile goes out together, as linger.ms sends it */

static long long *latencies;
static size_t latency_count, latency_capacity;
static long long failures;
static char first_failure[512];
static atomic_int polling = 1;
/* The longest write of a statistics line: it runs on the thread that serves
 * the delivery reports, so while stdout's pipe is full every report waits,
 * and the latencies it then records include that wait. */
static double stats_write_max_s;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void delivered(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    if (msg->err) {
        if (failures++ == 0)
            snprintf(first_failure, sizeof first_failure, "%s", rd_kafka_err2str(msg->err));
        return;
    }
    if (latency_count == latency_capacity) {
        latency_capacity = latency_capacity ? latency_capacity * 2 : 1 << 20;
        latencies = realloc(latencies, latency_capacity * sizeof *latencies);
        if (!latencies) {
            perror("rate-producer: realloc");
            exit(2);
        }
    }
    latencies[latency_count++] = (long long)rd_kafka_message_latency(msg);
}

static int statistics(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)opaque;
    double started = now_s();
    fwrite(json, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    double took = now_s() - started;
    if (took > stats_write_max_s)
        stats_write_max_s = took;
    return 0; /* librdkafka frees json */
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char error[512];
    if (rd_kafka_conf_set(conf, name, value, error, sizeof error) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "rate-producer: %s=%s: %s\n", name, value, error);
        exit(2);
    }
}

static void sched_ns(long long *ran, long long *waited) {
    char path[300];
    struct dirent *entry;
    DIR *tasks = opendir("/proc/self/task");
    *ran = *waited = 0;
    if (!tasks)
        return;
    while ((entry = readdir(tasks)) != NULL) {
        if (entry->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", entry->d_name);
        FILE *f = fopen(path, "r");
        long long r, w;
        if (f && fscanf(f, "%lld %lld", &r, &w) == 2) {
            *ran += r;
            *waited += w;
        }
        if (f)
            fclose(f);
    }
    closedir(tasks);
}

/* The only caller of rd_kafka_poll while it runs: delivery reports and statistics. */
static void *poller(void *arg) {
    rd_kafka_t *rk = arg;
    while (atomic_load(&polling))
        rd_kafka_poll(rk, 100);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC PARTITIONS BYTES_PER_SECOND SECONDS\n", argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    int partitions = atoi(argv[3]);
    double rate = atof(argv[4]), seconds = atof(argv[5]);
    if (partitions < 1 || rate <= 0 || seconds <= 0) {
        fprintf(stderr, "rate-producer: PARTITIONS, BYTES_PER_SECOND and SECONDS must be positive\n");
        return 2;
    }
    static char value[VALUE_BYTES];
    for (int i = 0; i < VALUE_BYTES; i++)
        value[i] = (char)(i & 0xff);

    char error[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "acks", "all");
    set(conf, "linger.ms", "5");
    set(conf, "batch.size", "1000000");
    set(conf, "compression.type", "none");
    set(conf, "statistics.interval.ms", "1000");
    rd_kafka_conf_set_dr_msg_cb(conf, delivered);
    rd_kafka_conf_set_stats_cb(conf, statistics);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, error, sizeof error);
    if (!rk) {
        fprintf(stderr, "rate-producer: %s\n", error);
        return 2;
    }

    pthread_t poll_thread;
    if (pthread_create(&poll_thread, NULL, poller, rk) != 0) {
        perror("rate-producer: pthread_create");
        return 2;
    }
    double interval = VALUE_BYTES / rate, start = now_s(), elapsed;
    long long sent = 0;
    struct timespec tick = {0, TICK_NS};
    while ((elapsed = now_s() - start) < seconds) {
        long long due = (long long)(elapsed / interval) + 1;
        if (sent >= due) {
            nanosleep(&tick, NULL);
            continue;
        }
        while (sent < due) {
            /* The value is static: librdkafka may point at it rather than copy it. */
            rd_kafka_resp_err_t err = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION((int32_t)(sent % partitions)),
                RD_KAFKA_V_VALUE(value, VALUE_BYTES), RD_KAFKA_V_END);
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                /* The broker is behind: wait for it, but not past the run's end (a rate
                 * above what the broker takes, as bench.store_mode asks for, stays behind). */
                if (now_s() - start >= seconds)
                    break;
                nanosleep(&tick, NULL);
                continue;
            }
            if (err) {
                fprintf(stderr, "rate-producer: produce: %s\n", rd_kafka_err2str(err));
                return 1;
            }
            sent++;
        }
    }
    /* Every message acknowledged and its report served (the out queue counts both). */
    double deadline = now_s() + 60;
    while (rd_kafka_outq_len(rk) > 0 && now_s() < deadline)
        nanosleep(&tick, NULL);
    atomic_store(&polling, 0);
    pthread_join(poll_thread, NULL);
    rd_kafka_poll(rk, 0);
    int queued = rd_kafka_outq_len(rk);
    if (queued > 0 || failures > 0) {
        fprintf(stderr, "rate-producer: delivery failed: %lld failed (%s), %d still queued\n",
                failures, first_failure, queued);
        return 1;
    }
    long long ran, waited;
    sched_ns(&ran, &waited);
    rd_kafka_destroy(rk);
    printf("{\"sent\": %lld, \"sched_ns\": [%lld, %lld], \"stats_write_max_us\": %lld, "
           "\"latencies_us\": [",
           sent, ran, waited, (long long)(stats_write_max_s * 1e6));
    for (size_t i = 0; i < latency_count; i++)
        printf(i ? ",%lld" : "%lld", latencies[i]);
    printf("]}\n");
    return 0;
}
