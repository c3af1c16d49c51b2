package io.natsdelivery.reporter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class DeliveryReporterTest {
    private static String report(DeliveryReporter reporter) {
        return new String(reporter.report(), StandardCharsets.UTF_8);
    }

    @Test
    void labelsTheExporterWouldRejectAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> new DeliveryReporter("", "i"));
        assertThrows(IllegalArgumentException.class, () -> new DeliveryReporter(null, "i"));
        String tooLong = "c".repeat(DeliveryReporter.MAX_LABEL_BYTES + 1);
        assertThrows(IllegalArgumentException.class, () -> new DeliveryReporter(tooLong, "i"));
        assertThrows(IllegalArgumentException.class, () -> new DeliveryReporter("c", tooLong));
        // Bytes, not characters: 43 three-byte characters are 129 bytes.
        assertThrows(IllegalArgumentException.class, () -> new DeliveryReporter("€".repeat(43), "i"));
        new DeliveryReporter("c".repeat(DeliveryReporter.MAX_LABEL_BYTES), "i");
    }

    @Test
    void theDefaultInstanceIsHostAndPid() {
        String instance = new DeliveryReporter("billing", null).instance();
        assertTrue(instance.endsWith(":" + ProcessHandle.current().pid()), instance);
        assertTrue(instance.indexOf(':') > 0, instance);
    }

    @Test
    void aReportHasTheProtocolsFieldsAndANewSequenceEachTime() {
        DeliveryReporter reporter = new DeliveryReporter("billing", "host-1:42");
        String first = report(reporter);
        assertTrue(first.startsWith("{\"version\":1,\"client\":\"billing\",\"instance\":\"host-1:42\",\"sequence\":1,"),
                first);
        // An empty list, never null: the exporter takes a null for a malformed report.
        assertTrue(first.contains(",\"subscriptions\":[],\"connection_events\":{\"connected\":0,"
                + "\"disconnected\":0,\"lame_duck\":0,\"closed\":0},\"jetstream_consumers\":[]}"), first);
        assertTrue(report(reporter).contains(",\"sequence\":2,"));
    }

    @Test
    void namesAreEscaped() {
        StringBuilder out = new StringBuilder();
        ReportJson.string(out, "a\"b\\c\nd");
        assertEquals("\"a\\\"b\\\\c\\u000ad\"", out.toString());
    }
}
