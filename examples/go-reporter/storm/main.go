// A nats.go application in a drop storm, reporting with natsdelivery.
//
// Three subscriptions of one subject, each with a slow handler: "by_messages"
// holds at most 100 pending messages, "by_bytes" at most 100 payloads' worth
// of bytes, and one made with nc.Subscribe directly (reported as
// "storm.data") at most 100 messages. A second connection publishes the
// messages. Once every message has been handed to a handler or dropped, the
// application stops its periodic reports, publishes a last one and prints
// one JSON line of its own counts: messages published, the subscriptions in
// the order they were made, messages each handler received, reports sent,
// the nats.go version.
// Then it waits for its standard input to close.
//
//	storm nats://127.0.0.1:4222 --messages 20000
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-delivery-exporter/nats-delivery-exporter/examples/go-reporter/natsdelivery"
)

var payload = make([]byte, 100)

// connectTimeout: nats.go gives up connecting after 2 s by default, which a
// loaded machine can pass.
const connectTimeout = 30 * time.Second

// limits: pending messages, pending bytes (-1: none).
var limits = []struct {
	name       string
	msgs, size int
}{
	{"by_messages", 100, -1},
	{"by_bytes", -1, 100 * len(payload)},
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: storm <server> [--messages N] [--client C] [--instance I] ...")
	}
	server := os.Args[1]
	flags := flag.NewFlagSet("storm", flag.ExitOnError)
	messages := flags.Int("messages", 20000, "messages to publish")
	client := flags.String("client", "go-storm", "client label")
	instance := flags.String("instance", "", "instance label")
	subject := flags.String("subject", natsdelivery.DefaultSubject, "report subject")
	interval := flags.Float64("interval", 0.2, "seconds between reports")
	timeout := flags.Float64("timeout", 60, "seconds for the storm to end")
	_ = flags.Parse(os.Args[2:])

	reporter, err := natsdelivery.New(*client, *instance)
	check(err)
	reporter.Subject = *subject
	reporter.Interval = time.Duration(*interval * float64(time.Second))
	nc, err := nats.Connect(server, append(reporter.Options(), nats.Name("storm-subscriber"), nats.Timeout(connectTimeout))...)
	check(err)
	reporter.Start(nc)
	// One count per subscription: the limits' and the plain one.
	received := make([]int64, len(limits)+1)
	subs := make([]*nats.Subscription, len(limits))
	for i, l := range limits {
		i := i
		subs[i], err = reporter.Subscribe(nc, "storm.data", l.name, func(*nats.Msg) {
			atomic.AddInt64(&received[i], 1)
			time.Sleep(200 * time.Microsecond)
		}, l.msgs, l.size)
		check(err)
	}
	// One the reporter is not told of: reported under its subject pattern
	// from its first ErrSlowConsumer on.
	plain, err := nc.Subscribe("storm.data", func(*nats.Msg) {
		atomic.AddInt64(&received[len(limits)], 1)
		time.Sleep(200 * time.Microsecond)
	})
	check(err)
	check(plain.SetPendingLimits(limits[0].msgs, limits[0].size))
	subs = append(subs, plain)
	check(nc.Flush())

	publisher, err := nats.Connect(server, nats.Name("storm-publisher"), nats.Timeout(connectTimeout))
	check(err)
	for i := 0; i < *messages; i++ {
		check(publisher.Publish("storm.data", payload))
	}
	check(publisher.Flush())

	deadline := time.Now().Add(time.Duration(*timeout * float64(time.Second)))
	for !settled(subs, received, *messages) {
		if time.Now().After(deadline) {
			fail("not every message was handed over or dropped in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
	reporter.Stop()
	reports, err := reporter.PublishNow(nc)
	check(err)
	check(nc.Flush())
	names := []string{}
	counts := map[string]int64{}
	for i, sub := range subs {
		name := sub.Subject
		if i < len(limits) {
			name = limits[i].name
		}
		names = append(names, name)
		counts[name] = atomic.LoadInt64(&received[i])
	}
	line, _ := json.Marshal(map[string]interface{}{
		"published": *messages, "subscriptions": names, "received": counts, "reports": reports,
		"library": "nats.go " + nats.Version,
	})
	fmt.Println(string(line))
	_, _ = io.Copy(io.Discard, os.Stdin)
	publisher.Close()
	nc.Close()
}

// settled: every message arrived and was handed to the handler (which
// counted it) or dropped, and nothing is pending.
func settled(subs []*nats.Subscription, received []int64, messages int) bool {
	for i, sub := range subs {
		delivered, _ := sub.Delivered()
		dropped, _ := sub.Dropped()
		pending, _, _ := sub.Pending()
		if pending != 0 || int(delivered)+dropped != messages ||
			atomic.LoadInt64(&received[i]) != delivered {
			return false
		}
	}
	return true
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(why string) {
	fmt.Fprintln(os.Stderr, why)
	os.Exit(1)
}
