// Package natsdelivery counts what a nats.go application's subscriptions
// drop and publishes the totals as nats-delivery reports
// (docs/report-protocol.md, version 1), which
// `nats-delivery-exporter --client-reports` re-exports as nats_delivery_app_*
// series.
//
// nats.go counts every message a subscription drops over its pending limits
// (Subscription.Dropped) and the messages it handed to the application
// (Delivered); the reporter publishes those. Its asynchronous error handler
// sees ErrSlowConsumer once per run of drops (until a message fits again),
// so those events are reported as slow_consumer_events, a lower bound.
//
// Tested with nats.go 1.56.0 and 1.41.2; needs nothing else.
package natsdelivery

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ProtocolVersion is the report version this package writes.
const ProtocolVersion = 1

// DefaultSubject is the subject prefix the exporter listens on by default:
// reports go to <prefix>.<client>, the only subject the exporter takes the
// client's reports from.
const DefaultSubject = "nats_delivery.reports"

// maxLabelBytes: the exporter rejects a report whose client or instance is longer.
const maxLabelBytes = 128

type totals struct {
	delivered, dropped, events uint64
	// A channel subscription: nats.go does not count what it delivered.
	unknownDelivered bool
}

type tracked struct {
	name   string
	events uint64
	// The counts last read, for when nats.go no longer tells them.
	delivered, dropped uint64
	// The message and bytes its handler is working on, for a subscription
	// made by Subscribe (nil otherwise): nats.go counts them as pending
	// until the handler returns.
	handling *[2]int64
}

// pendingOf is sub's pending messages and bytes less the ones its handler
// is working on; -1s when nats.go cannot tell.
func (t *tracked) pendingOf(sub *nats.Subscription) (int, int) {
	msgs, bytes, err := sub.Pending()
	if err != nil {
		return -1, -1
	}
	if t.handling != nil {
		msgs -= int(atomic.LoadInt64(&t.handling[0]))
		bytes -= int(atomic.LoadInt64(&t.handling[1]))
	}
	return nonNegative(msgs), nonNegative(bytes)
}

func nonNegative(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// Reporter counts the drops of one connection and publishes reports on it.
type Reporter struct {
	Client   string        // the client label: the application's name
	Instance string        // the instance label: this process
	Subject  string        // report subject prefix: reports go to Subject + "." + Client
	Interval time.Duration // time between reports
	// OnAsyncError, when set, is called with every asynchronous error after
	// it was counted (the application's own error handler).
	OnAsyncError nats.ErrHandler

	mu       sync.Mutex
	sequence uint64
	events   map[string]uint64
	live     map[*nats.Subscription]*tracked
	retired  map[string]*totals
	stop     chan struct{}
	done     chan struct{}
}

// New makes a reporter for the application `client`; an empty instance
// means "<hostname>:<pid>", as the Rust crate names an instance.
func New(client, instance string) (*Reporter, error) {
	if instance == "" {
		host, _ := os.Hostname()
		if h := os.Getenv("HOSTNAME"); h != "" {
			host = h
		}
		if host == "" {
			host = "unknown"
		}
		instance = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	for _, v := range []string{client, instance} {
		if v == "" || len(v) > maxLabelBytes {
			return nil, fmt.Errorf("client and instance must be 1 to %d bytes, got %q", maxLabelBytes, v)
		}
	}
	return &Reporter{
		Client: client, Instance: instance, Subject: DefaultSubject, Interval: 5 * time.Second,
		events:  map[string]uint64{"connected": 0, "disconnected": 0, "lame_duck": 0, "closed": 0},
		live:    map[*nats.Subscription]*tracked{},
		retired: map[string]*totals{},
	}, nil
}

// Options are the connection options that count events and slow consumers.
func (r *Reporter) Options() []nats.Option {
	count := func(event string) nats.ConnHandler {
		return func(*nats.Conn) { r.mu.Lock(); r.events[event]++; r.mu.Unlock() }
	}
	return []nats.Option{
		nats.ErrorHandler(r.asyncError),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { count("disconnected")(nil) }),
		// A reconnection is a connection again; the first one is counted by Start.
		nats.ReconnectHandler(count("connected")),
		nats.ClosedHandler(count("closed")),
		nats.LameDuckModeHandler(count("lame_duck")),
	}
}

func (r *Reporter) asyncError(nc *nats.Conn, sub *nats.Subscription, err error) {
	if err == nats.ErrSlowConsumer && sub != nil {
		r.mu.Lock()
		t := r.live[sub]
		if t == nil {
			// A subscription not made through the reporter: counted under
			// its subject pattern (a bounded label, never a message subject).
			t = &tracked{name: sub.Subject}
			r.live[sub] = t
		}
		t.events++
		r.mu.Unlock()
	}
	if r.OnAsyncError != nil {
		r.OnAsyncError(nc, sub, err)
	}
}

// Track reports sub under name; subscriptions sharing a name add up.
func (r *Reporter) Track(sub *nats.Subscription, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.live[sub]; t != nil {
		t.name = name
		return
	}
	r.live[sub] = &tracked{name: name}
}

// Subscribe subscribes handler to subject with pending limits (a negative
// limit is none), reported under name.
func (r *Reporter) Subscribe(nc *nats.Conn, subject, name string, handler nats.MsgHandler,
	msgLimit, bytesLimit int) (*nats.Subscription, error) {
	t := &tracked{name: name, handling: &[2]int64{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		atomic.AddInt64(&t.handling[0], 1)
		atomic.AddInt64(&t.handling[1], int64(len(m.Data)))
		defer atomic.AddInt64(&t.handling[1], -int64(len(m.Data)))
		defer atomic.AddInt64(&t.handling[0], -1)
		handler(m)
	})
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(msgLimit, bytesLimit); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	r.mu.Lock()
	r.live[sub] = t
	r.mu.Unlock()
	return sub, nil
}

// Unsubscribe unsubscribes sub and keeps its totals. nats.go discards the
// messages still pending: they are counted as dropped. nats.go has no
// snapshot of a subscription's counts, so a message handed to the handler
// between the reads below and the unsubscribe counts as dropped too, and
// so does, for a subscription not made by Subscribe, the message its
// handler is working on.
func (r *Reporter) Unsubscribe(sub *nats.Subscription) error {
	r.mu.Lock()
	t := r.live[sub]
	delete(r.live, sub)
	r.mu.Unlock()
	if t == nil {
		return sub.Unsubscribe()
	}
	delivered, err1 := sub.Delivered()
	dropped, err2 := sub.Dropped()
	// The message a handler is working on is delivered, not discarded.
	pending, _ := t.pendingOf(sub)
	if pending < 0 {
		pending = 0 // closed, or a channel subscription
	}
	channel := sub.Type() == nats.ChanSubscription
	err := sub.Unsubscribe()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err1 == nil && err2 == nil {
		t.delivered, t.dropped = uint64(delivered), uint64(dropped)+uint64(pending)
	}
	tot := r.retired[t.name]
	if tot == nil {
		tot = &totals{}
		r.retired[t.name] = tot
	}
	tot.delivered += t.delivered
	tot.dropped += t.dropped
	tot.events += t.events
	tot.unknownDelivered = tot.unknownDelivered || channel
	return err
}
