package io.natsdelivery.reporter;

import java.util.Map;

/** Writes a report as JSON (docs/report-protocol.md), with no library but the JDK. */
final class ReportJson {
    private ReportJson() {}

    /** One subscription name's counts. */
    static final class Entry {
        long delivered;
        long dropped;
        long events;
        /** Null when no live consumer of the name can tell: then left out. */
        Long pending;
    }

    static String write(DeliveryReporter reporter, long sequence, Map<String, Entry> entries,
            Map<String, Long> events) {
        StringBuilder out = new StringBuilder(256);
        out.append("{\"version\":").append(DeliveryReporter.PROTOCOL_VERSION);
        out.append(",\"client\":");
        string(out, reporter.client());
        out.append(",\"instance\":");
        string(out, reporter.instance());
        out.append(",\"sequence\":").append(sequence);
        out.append(",\"timestamp_ms\":").append(System.currentTimeMillis());
        out.append(",\"subscriptions\":[");
        boolean first = true;
        for (Map.Entry<String, Entry> e : entries.entrySet()) {
            Entry entry = e.getValue();
            out.append(first ? "" : ",").append("{\"subscription\":");
            string(out, e.getKey());
            out.append(",\"delivered_messages\":").append(entry.delivered);
            out.append(",\"dropped_messages\":").append(entry.dropped);
            out.append(",\"slow_consumer_events\":").append(entry.events);
            if (entry.pending != null) {
                out.append(",\"pending_messages\":").append(entry.pending);
            }
            out.append('}');
            first = false;
        }
        out.append("],\"connection_events\":{");
        first = true;
        for (Map.Entry<String, Long> e : events.entrySet()) {
            out.append(first ? "" : ",");
            string(out, e.getKey());
            out.append(':').append(e.getValue());
            first = false;
        }
        out.append("},\"jetstream_consumers\":[]}");
        return out.toString();
    }

    /** A JSON string: quotes, backslashes and control characters escaped. */
    static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }
}
