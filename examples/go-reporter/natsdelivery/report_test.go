package natsdelivery

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestNewRefusesLabelsTheExporterWouldReject(t *testing.T) {
	for _, c := range []struct{ client, instance string }{
		{"", "i"},
		{strings.Repeat("c", maxLabelBytes+1), "i"},
		{"c", strings.Repeat("i", maxLabelBytes+1)},
	} {
		if _, err := New(c.client, c.instance); err == nil {
			t.Errorf("New(%q, %q) accepted labels the exporter rejects", c.client, c.instance)
		}
	}
	if _, err := New(strings.Repeat("c", maxLabelBytes), "i"); err != nil {
		t.Errorf("a %d-byte client is allowed: %v", maxLabelBytes, err)
	}
}

func TestDefaultInstanceIsHostAndPid(t *testing.T) {
	r, err := New("billing", "")
	if err != nil {
		t.Fatal(err)
	}
	host, pid, found := strings.Cut(r.Instance, ":")
	if !found || host == "" || pid == "" {
		t.Errorf("instance %q is not <hostname>:<pid>", r.Instance)
	}
}

// The fields docs/report-protocol.md requires, and a sequence that starts
// at 1 and grows by one per report.
func TestReportFollowsTheProtocol(t *testing.T) {
	r, err := New("billing", "host-1:42")
	if err != nil {
		t.Fatal(err)
	}
	if r.Subject != DefaultSubject || DefaultSubject != "nats_delivery.reports" {
		t.Errorf("subject %q", r.Subject)
	}
	for want := uint64(1); want <= 2; want++ {
		var got map[string]interface{}
		if err := json.Unmarshal(r.Report(), &got); err != nil {
			t.Fatal(err)
		}
		if got["version"] != float64(1) || got["client"] != "billing" || got["instance"] != "host-1:42" {
			t.Errorf("identity: %v", got)
		}
		if got["sequence"] != float64(want) {
			t.Errorf("sequence %v, want %d", got["sequence"], want)
		}
		if subs, ok := got["subscriptions"].([]interface{}); !ok || len(subs) != 0 {
			t.Errorf("subscriptions: %v", got["subscriptions"])
		}
		events, _ := got["connection_events"].(map[string]interface{})
		for _, e := range []string{"connected", "disconnected", "lame_duck", "closed"} {
			if events[e] != float64(0) {
				t.Errorf("connection event %s: %v", e, events[e])
			}
		}
	}
}

// Totals of unsubscribed subscriptions stay in every report, summed by name.
func TestRetiredTotalsAreKeptAndSummedByName(t *testing.T) {
	r, err := New("billing", "host-1:42")
	if err != nil {
		t.Fatal(err)
	}
	r.retired["orders"] = &totals{delivered: 7, dropped: 3, events: 1}
	var got struct {
		Subscriptions []map[string]interface{} `json:"subscriptions"`
	}
	if err := json.Unmarshal(r.Report(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]interface{}{
		"subscription": "orders", "delivered_messages": float64(7),
		"dropped_messages": float64(3), "slow_consumer_events": float64(1),
	}
	if len(got.Subscriptions) != 1 {
		t.Fatalf("subscriptions: %v", got.Subscriptions)
	}
	for k, v := range want {
		if got.Subscriptions[0][k] != v {
			t.Errorf("%s: %v, want %v", k, got.Subscriptions[0][k], v)
		}
	}
	if _, ok := got.Subscriptions[0]["pending_messages"]; ok {
		t.Errorf("pending values of a name with no live subscription: %v", got.Subscriptions[0])
	}
}
