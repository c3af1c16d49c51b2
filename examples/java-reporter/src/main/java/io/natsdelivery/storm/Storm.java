package io.natsdelivery.storm;

import io.nats.client.Connection;
import io.nats.client.Consumer;
import io.nats.client.Message;
import io.nats.client.Nats;
import io.nats.client.Options;
import io.nats.client.Subscription;
import io.natsdelivery.reporter.DeliveryReporter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

/**
 * A jnats application in a drop storm, reporting with DeliveryReporter.
 *
 * <p>Three consumers of one subject, each slow: "by_messages" (a dispatcher) holds at most 100
 * pending messages, "by_bytes" (a dispatcher) at most 100 messages' worth of bytes, and a
 * synchronous subscription made with {@code nc.subscribe} directly (reported as "storm.data", from
 * its first slow-consumer event on) at most 100 messages. A second connection publishes the
 * messages. Once every message has been handed over or dropped and jnats has told the listener of
 * each consumer that dropped, the application stops its periodic reports, publishes a last one
 * and prints one JSON line of its own counts: messages published, the subscriptions in the order
 * they were made, messages each one received, reports sent, the jnats version. Then it waits for
 * its standard input to close.
 *
 * <pre>java -cp ... io.natsdelivery.storm.Storm nats://127.0.0.1:4222 --messages 20000</pre>
 */
public final class Storm {
    private static final byte[] PAYLOAD = new byte[100];
    /** jnats gives up connecting after 2 s by default, which a loaded machine passed. */
    private static final Duration CONNECT_TIMEOUT = Duration.ofSeconds(30);
    private static final String SUBJECT = "storm.data";
    /** The server's MSG line and CRLFs, which jnats counts in a message's bytes. */
    private static final int WIRE_OVERHEAD = 32;

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            fail("usage: Storm <server> [--messages N] [--client C] [--instance I] ...");
        }
        Map<String, String> flags = new LinkedHashMap<>();
        flags.put("--messages", "20000");
        flags.put("--client", "java-storm");
        flags.put("--instance", "");
        flags.put("--subject", DeliveryReporter.DEFAULT_SUBJECT);
        flags.put("--interval", "0.2");
        flags.put("--timeout", "60");
        for (int i = 1; i + 1 < args.length; i += 2) {
            if (!flags.containsKey(args[i])) {
                fail("unknown flag " + args[i]);
            }
            flags.put(args[i], args[i + 1]);
        }
        int messages = Integer.parseInt(flags.get("--messages"));
        DeliveryReporter reporter = new DeliveryReporter(flags.get("--client"), flags.get("--instance"))
                .subject(flags.get("--subject"))
                .interval(seconds(flags.get("--interval")));
        Options.Builder options = new Options.Builder().server(args[0]).connectionName("storm-subscriber")
                .connectionTimeout(CONNECT_TIMEOUT);
        Connection nc = Nats.connect(reporter.options(options, null).build());
        reporter.start(nc);

        List<String> names = List.of("by_messages", "by_bytes", SUBJECT);
        AtomicLong[] received = {new AtomicLong(), new AtomicLong(), new AtomicLong()};
        List<Consumer> consumers = new ArrayList<>();
        consumers.add(reporter.subscribe(nc, SUBJECT, names.get(0), m -> slow(received[0]), 100, 0));
        consumers.add(reporter.subscribe(nc, SUBJECT, names.get(1), m -> slow(received[1]), 0,
                100L * (PAYLOAD.length + WIRE_OVERHEAD)));
        // One the reporter is not told of, read by a thread of the application's own.
        Subscription plain = nc.subscribe(SUBJECT);
        plain.setPendingLimits(100, 0);
        consumers.add(plain);
        Thread reader = new Thread(() -> {
            try {
                while (true) {
                    Message m = plain.nextMessage(Duration.ofMillis(100));
                    if (m != null) {
                        slow(received[2]);
                    }
                }
            } catch (InterruptedException | IllegalStateException e) {
                // Closed at the end.
            }
        }, "storm-plain-reader");
        reader.setDaemon(true);
        reader.start();
        nc.flush(Duration.ofSeconds(10));

        Connection publisher = Nats.connect(new Options.Builder().server(args[0])
                .connectionName("storm-publisher").connectionTimeout(CONNECT_TIMEOUT).build());
        for (int i = 0; i < messages; i++) {
            publisher.publish(SUBJECT, PAYLOAD);
        }
        publisher.flush(Duration.ofSeconds(30));

        long deadline = System.nanoTime() + seconds(flags.get("--timeout")).toNanos();
        while (!settled(reporter, consumers, received, messages)) {
            if (System.nanoTime() > deadline) {
                fail("not every message was handed over or dropped in time");
            }
            Thread.sleep(50);
        }
        reporter.stop();
        long reports = reporter.publishNow(nc);
        nc.flush(Duration.ofSeconds(10));
        StringBuilder line = new StringBuilder("{\"published\":").append(messages);
        line.append(",\"subscriptions\":[\"").append(String.join("\",\"", names)).append("\"]");
        line.append(",\"received\":{");
        for (int i = 0; i < names.size(); i++) {
            line.append(i == 0 ? "" : ",").append('"').append(names.get(i)).append("\":")
                    .append(received[i].get());
        }
        line.append("},\"reports\":").append(reports);
        line.append(",\"library\":\"jnats ").append(Nats.CLIENT_VERSION).append("\"}");
        System.out.println(line);
        System.out.flush();
        while (System.in.read() != -1) {
            // Wait for the standard input to close.
        }
        publisher.close();
        nc.close();
    }

    /** A slow handler: the messages the server sends meanwhile pile up over the limits. */
    private static void slow(AtomicLong received) {
        received.incrementAndGet();
        LockSupport.parkNanos(200_000);
    }

    /**
     * Every message was handed to the application (which counted it) or dropped, nothing is
     * pending, and each consumer that dropped had its slow-consumer event (jnats calls the
     * listener on a thread of its own, later than the drop).
     */
    private static boolean settled(DeliveryReporter reporter, List<Consumer> consumers,
            AtomicLong[] received, int messages) {
        for (int i = 0; i < consumers.size(); i++) {
            Consumer c = consumers.get(i);
            if (c.getPendingMessageCount() != 0
                    || c.getDeliveredCount() + c.getDroppedCount() != messages
                    || received[i].get() != c.getDeliveredCount()
                    || (c.getDroppedCount() > 0 && reporter.slowConsumerEvents(c) == 0)) {
                return false;
            }
        }
        return true;
    }

    private static Duration seconds(String value) {
        return Duration.ofNanos((long) (Double.parseDouble(value) * 1e9));
    }

    private static void fail(String why) {
        System.err.println(why);
        System.exit(1);
    }
}
