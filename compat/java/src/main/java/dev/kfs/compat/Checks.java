package dev.kfs.compat;

import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.apache.kafka.common.KafkaFuture;

/** Assertions that name what was expected and what was found. */
final class Checks {
    /** What a scenario throws when the broker's answer is not the expected one. */
    static final class Failed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Failed(String message) {
            super(message);
        }

        Failed(String message, Throwable cause) {
            super(message, cause);
        }
    }

    static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(30);

    private Checks() {}

    static void check(boolean holds, String format, Object... args) {
        if (!holds) {
            throw new Failed(String.format(format, args));
        }
    }

    static <T> void checkEquals(T expected, T actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new Failed(what + ": expected " + expected + ", got " + actual);
        }
    }

    /** Polls {@code condition} every 50 ms; `Failed` naming {@code what} (and {@code state}) once time is up. */
    static void waitUntil(String what, Duration timeout, BooleanSupplier condition, Supplier<String> state)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new Failed("timed out after " + timeout.toMillis() + " ms waiting for " + what
                        + (state == null ? "" : "; " + state.get()));
            }
            Thread.sleep(50);
        }
    }

    static void waitUntil(String what, Duration timeout, BooleanSupplier condition) throws InterruptedException {
        waitUntil(what, timeout, condition, null);
    }

    /** The future's value; a failure is rethrown as `Failed` naming {@code what}. */
    static <T> T get(KafkaFuture<T> future, String what) throws InterruptedException {
        try {
            return future.get(REQUEST_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw new Failed(what + " failed", e.getCause());
        } catch (TimeoutException e) {
            throw new Failed(what + ": no answer in " + REQUEST_TIMEOUT.toMillis() + " ms");
        }
    }

    /** Checks that the future fails with {@code expected} (or a subclass); returns that error. */
    static Throwable failsWith(KafkaFuture<?> future, Class<? extends Throwable> expected, String what)
            throws InterruptedException {
        try {
            Object value = future.get(REQUEST_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            throw new Failed(what + ": expected " + expected.getSimpleName() + ", but it succeeded: " + value);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (!expected.isInstance(cause)) {
                throw new Failed(what + ": expected " + expected.getSimpleName() + ", got "
                        + cause.getClass().getSimpleName() + ": " + cause.getMessage());
            }
            return cause;
        } catch (TimeoutException e) {
            throw new Failed(what + ": no answer in " + REQUEST_TIMEOUT.toMillis() + " ms");
        }
    }
}
