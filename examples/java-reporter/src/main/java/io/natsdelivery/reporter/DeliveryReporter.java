package io.natsdelivery.reporter;

import io.nats.client.Connection;
import io.nats.client.ConnectionListener;
import io.nats.client.Consumer;
import io.nats.client.Dispatcher;
import io.nats.client.ErrorListener;
import io.nats.client.Message;
import io.nats.client.MessageHandler;
import io.nats.client.Options;
import io.nats.client.Subscription;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Counts what a jnats application's subscriptions drop and publishes the totals as
 * nats-delivery reports (docs/report-protocol.md, version 1), which
 * {@code nats-delivery-exporter --client-reports} re-exports as {@code nats_delivery_app_*} series.
 *
 * <p>jnats counts the messages each {@link Consumer} (a {@link Dispatcher}, or a synchronous
 * {@link Subscription}) drops over its pending limits ({@link Consumer#getDroppedCount()}) and
 * the messages it handed to the application ({@link Consumer#getDeliveredCount()}); the reporter
 * publishes those, so {@code dropped_messages} is exact. A dispatcher's subscriptions share its
 * queue, and jnats counts their drops on the dispatcher: {@link #subscribe} makes a dispatcher per
 * subscription. jnats calls {@link ErrorListener#slowConsumerDetected} once per run of drops (until
 * a message fits again): {@code slow_consumer_events} is a lower bound.
 */
public final class DeliveryReporter implements ConnectionListener {
    /** The report version this class writes. */
    public static final int PROTOCOL_VERSION = 1;
    /**
     * The subject prefix the exporter listens on by default: reports go on
     * {@code <prefix>.<client>}, and the exporter refuses a report whose client is not that token.
     */
    public static final String DEFAULT_SUBJECT = "nats_delivery.reports";
    /** The exporter rejects a report whose client or instance is longer (UTF-8 bytes). */
    static final int MAX_LABEL_BYTES = 128;

    private final String client;
    private final String instance;
    private volatile String subject = DEFAULT_SUBJECT;
    private volatile Duration interval = Duration.ofSeconds(5);

    private long sequence;
    private final Map<String, Long> events = new LinkedHashMap<>();
    private final Map<Consumer, Tracked> live = new IdentityHashMap<>();
    private final Map<String, Totals> retired = new LinkedHashMap<>();
    private ScheduledExecutorService timer;

    /** The counts of one name's unsubscribed consumers. */
    private static final class Totals {
        long delivered;
        long dropped;
        long events;
    }

    /** A live consumer, its name and the slow-consumer events jnats gave for it. */
    private static final class Tracked {
        String name;
        long events;

        Tracked(String name) {
            this.name = name;
        }
    }

    /**
     * A reporter for the application {@code client}; a null or empty {@code instance} means
     * {@code <hostname>:<pid>}, as the Rust crate names an instance.
     */
    public DeliveryReporter(String client, String instance) {
        if (instance == null || instance.isEmpty()) {
            instance = defaultInstance();
        }
        for (String value : new String[] {client, instance}) {
            int bytes = value == null ? 0 : value.getBytes(StandardCharsets.UTF_8).length;
            if (bytes == 0 || bytes > MAX_LABEL_BYTES) {
                throw new IllegalArgumentException(
                        "client and instance must be 1 to " + MAX_LABEL_BYTES + " bytes, got " + value);
            }
        }
        // The client is the last token of the report's subject: one token.
        if (!client.matches("[^.*>\\s]+")) {
            throw new IllegalArgumentException(
                    "client must be one subject token (no '.', '*', '>' or whitespace), got " + client);
        }
        this.client = client;
        this.instance = instance;
        for (String event : new String[] {"connected", "disconnected", "lame_duck", "closed"}) {
            events.put(event, 0L);
        }
    }

    static String defaultInstance() {
        String host = System.getenv("HOSTNAME");
        if (host == null || host.isEmpty()) {
            try {
                host = InetAddress.getLocalHost().getHostName();
            } catch (Exception e) {
                host = "unknown";
            }
        }
        return host.trim() + ":" + ProcessHandle.current().pid();
    }

    public String client() {
        return client;
    }

    public String instance() {
        return instance;
    }

    /** Sets the report subject prefix (default {@value #DEFAULT_SUBJECT}); reports go on {@code <prefix>.<client>}. */
    public DeliveryReporter subject(String subject) {
        this.subject = subject;
        return this;
    }

    /** Sets the time between reports (default 5 s). */
    public DeliveryReporter interval(Duration interval) {
        this.interval = interval;
        return this;
    }

    /**
     * Adds the reporter's listeners to {@code builder}: connection events, and an error listener
     * that counts slow consumers and then calls {@code appListener} (may be null) for them and for
     * errors, exceptions and discarded messages. An application whose own listener handles more of
     * {@link ErrorListener} keeps it and calls {@link #slowConsumerDetected} from it instead.
     */
    public Options.Builder options(Options.Builder builder, ErrorListener appListener) {
        return builder.connectionListener(this).errorListener(new ErrorListener() {
            @Override
            public void slowConsumerDetected(Connection conn, Consumer consumer) {
                DeliveryReporter.this.slowConsumerDetected(conn, consumer);
                if (appListener != null) {
                    appListener.slowConsumerDetected(conn, consumer);
                }
            }

            @Override
            public void errorOccurred(Connection conn, String error) {
                if (appListener != null) {
                    appListener.errorOccurred(conn, error);
                }
            }

            @Override
            public void exceptionOccurred(Connection conn, Exception exp) {
                if (appListener != null) {
                    appListener.exceptionOccurred(conn, exp);
                }
            }

            @Override
            public void messageDiscarded(Connection conn, Message msg) {
                if (appListener != null) {
                    appListener.messageDiscarded(conn, msg);
                }
            }
        });
    }

    /**
     * Counts a slow-consumer event of {@code consumer}. One the reporter was not told of is
     * reported from then on: a subscription under its subject (a bounded label, never a message's
     * subject), a dispatcher under {@code "dispatcher"}.
     */
    public synchronized void slowConsumerDetected(Connection conn, Consumer consumer) {
        Tracked t = live.get(consumer);
        if (t == null) {
            String name = consumer instanceof Subscription ? ((Subscription) consumer).getSubject() : "dispatcher";
            t = new Tracked(name);
            live.put(consumer, t);
        }
        t.events++;
    }

    /** Counts connection events (jnats calls this on its callback thread). */
    @Override
    @SuppressWarnings("deprecation")
    public synchronized void connectionEvent(Connection conn, Events type) {
        switch (type) {
            case CONNECTED:
            case RECONNECTED:
                // The first connection and every reconnection, as the protocol counts them.
                events.merge("connected", 1L, Long::sum);
                break;
            case DISCONNECTED:
                events.merge("disconnected", 1L, Long::sum);
                break;
            case CLOSED:
                events.merge("closed", 1L, Long::sum);
                break;
            case LAME_DUCK:
                events.merge("lame_duck", 1L, Long::sum);
                break;
            default:
                break;
        }
    }

    /** Reports {@code consumer} under {@code name}; consumers sharing a name add up. */
    public synchronized void track(Consumer consumer, String name) {
        Tracked t = live.get(consumer);
        if (t != null) {
            t.name = name;
        } else {
            live.put(consumer, new Tracked(name));
        }
    }

    /**
     * Subscribes {@code handler} to {@code subject} on a dispatcher of its own with pending limits
     * (0 or less: none; jnats counts a message's bytes as they came over the wire), reported under
     * {@code name}. Returns the dispatcher.
     */
    public Dispatcher subscribe(Connection nc, String subject, String name, MessageHandler handler,
            long maxMessages, long maxBytes) {
        Dispatcher dispatcher = nc.createDispatcher();
        dispatcher.setPendingLimits(maxMessages, maxBytes);
        track(dispatcher, name);
        dispatcher.subscribe(subject, handler);
        return dispatcher;
    }

    /**
     * Closes {@code consumer} (a dispatcher: {@link Connection#closeDispatcher}; a subscription:
     * unsubscribe) and keeps its totals. jnats discards the messages still pending: they are
     * counted as dropped.
     */
    public void unsubscribe(Connection nc, Consumer consumer) {
        Tracked t;
        synchronized (this) {
            t = live.remove(consumer);
        }
        long delivered = consumer.getDeliveredCount();
        long dropped = consumer.getDroppedCount() + Math.max(0, consumer.getPendingMessageCount());
        if (consumer instanceof Dispatcher) {
            nc.closeDispatcher((Dispatcher) consumer);
        } else {
            ((Subscription) consumer).unsubscribe();
        }
        if (t == null) {
            return;
        }
        synchronized (this) {
            Totals totals = retired.computeIfAbsent(t.name, n -> new Totals());
            totals.delivered += delivered;
            totals.dropped += dropped;
            totals.events += t.events;
        }
    }

    /** The body of the next report (its sequence is taken). */
    public synchronized byte[] report() {
        sequence++;
        return ReportJson.write(this, sequence, entries(), events).getBytes(StandardCharsets.UTF_8);
    }

    /** One entry per name: the live consumers' counts now and the retired totals. */
    private Map<String, ReportJson.Entry> entries() {
        Map<String, ReportJson.Entry> byName = new LinkedHashMap<>();
        for (Map.Entry<String, Totals> e : retired.entrySet()) {
            ReportJson.Entry entry = byName.computeIfAbsent(e.getKey(), n -> new ReportJson.Entry());
            entry.delivered += e.getValue().delivered;
            entry.dropped += e.getValue().dropped;
            entry.events += e.getValue().events;
        }
        for (Map.Entry<Consumer, Tracked> e : live.entrySet()) {
            Consumer c = e.getKey();
            ReportJson.Entry entry = byName.computeIfAbsent(e.getValue().name, n -> new ReportJson.Entry());
            entry.delivered += c.getDeliveredCount();
            entry.dropped += c.getDroppedCount();
            entry.events += e.getValue().events;
            long pending = c.getPendingMessageCount();
            if (pending >= 0) {
                entry.pending = (entry.pending == null ? 0 : entry.pending) + pending;
            }
        }
        return byName;
    }

    /** Publishes one report on {@code nc}; returns its sequence. */
    public long publishNow(Connection nc) {
        byte[] body;
        long seq;
        synchronized (this) {
            body = report();
            seq = sequence;
        }
        nc.publish(subject + "." + client, body);
        return seq;
    }

    /** Publishes a report on {@code nc} every interval until {@link #stop()}. */
    public synchronized void start(Connection nc) {
        timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "nats-delivery-reporter");
            t.setDaemon(true);
            return t;
        });
        long every = interval.toMillis();
        timer.scheduleAtFixedRate(() -> {
            try {
                publishNow(nc);
            } catch (RuntimeException e) {
                // The next report carries the same totals and more.
            }
        }, every, every, TimeUnit.MILLISECONDS);
    }

    /** Stops the periodic reports; a report being published is finished. */
    public void stop() throws InterruptedException {
        ScheduledExecutorService t;
        synchronized (this) {
            t = timer;
            timer = null;
        }
        if (t != null) {
            t.shutdown();
            t.awaitTermination(1, TimeUnit.MINUTES);
        }
    }

    /** The slow-consumer events counted for {@code consumer} (0 if it is not reported). */
    public synchronized long slowConsumerEvents(Consumer consumer) {
        Tracked t = live.get(consumer);
        return t == null ? 0 : t.events;
    }
}
