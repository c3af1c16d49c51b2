package natsdelivery

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
)

type subscriptionReport struct {
	Subscription       string  `json:"subscription"`
	Delivered          *uint64 `json:"delivered_messages,omitempty"`
	DroppedMessages    uint64  `json:"dropped_messages"`
	SlowConsumerEvents uint64  `json:"slow_consumer_events"`
	PendingMessages    *uint64 `json:"pending_messages,omitempty"`
	PendingBytes       *uint64 `json:"pending_bytes,omitempty"`
	// The sum of delivered messages, written as Delivered unless a
	// subscription of the name cannot tell it.
	DeliveredMessages uint64 `json:"-"`
	unknownDelivered  bool
}

type report struct {
	Version            int                   `json:"version"`
	Client             string                `json:"client"`
	Instance           string                `json:"instance"`
	Sequence           uint64                `json:"sequence"`
	TimestampMs        int64                 `json:"timestamp_ms"`
	Subscriptions      []*subscriptionReport `json:"subscriptions"`
	ConnectionEvents   map[string]uint64     `json:"connection_events"`
	JetStreamConsumers []struct{}            `json:"jetstream_consumers"`
}

// subscriptions sums the live and unsubscribed subscriptions by name; r.mu held.
func (r *Reporter) subscriptions() []*subscriptionReport {
	byName := map[string]*subscriptionReport{}
	// Not nil: the protocol takes a null `subscriptions` for a malformed report.
	order := []*subscriptionReport{}
	entry := func(name string) *subscriptionReport {
		e := byName[name]
		if e == nil {
			e = &subscriptionReport{Subscription: name}
			byName[name] = e
			order = append(order, e)
		}
		return e
	}
	for name, t := range r.retired {
		e := entry(name)
		e.DeliveredMessages += t.delivered
		e.DroppedMessages += t.dropped
		e.SlowConsumerEvents += t.events
		e.unknownDelivered = e.unknownDelivered || t.unknownDelivered
	}
	for sub, t := range r.live {
		e := entry(t.name)
		e.SlowConsumerEvents += t.events
		delivered, err1 := sub.Delivered()
		dropped, err2 := sub.Dropped()
		if err1 == nil && err2 == nil {
			t.delivered, t.dropped = uint64(delivered), uint64(dropped)
		}
		// Otherwise closed other than through Unsubscribe (auto-unsubscribe,
		// the connection closed): nats.go no longer tells its counts, so the
		// last ones read stand.
		e.DroppedMessages += t.dropped
		if sub.Type() == nats.ChanSubscription {
			// nats.go counts neither what the application took from the
			// channel nor what is pending in it.
			e.unknownDelivered = true
			continue
		}
		e.DeliveredMessages += t.delivered
		if msgs, bytes := t.pendingOf(sub); msgs >= 0 {
			if e.PendingMessages == nil {
				e.PendingMessages, e.PendingBytes = new(uint64), new(uint64)
			}
			*e.PendingMessages += uint64(msgs)
			*e.PendingBytes += uint64(bytes)
		}
	}
	for _, e := range order {
		if !e.unknownDelivered {
			e.Delivered = &e.DeliveredMessages
		}
	}
	return order
}

// Report is the body of the next report (its sequence is taken).
func (r *Reporter) Report() []byte {
	body, _ := r.encode()
	return body
}

// encode returns the next report's body and sequence.
func (r *Reporter) encode() ([]byte, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sequence++
	events := make(map[string]uint64, len(r.events))
	for k, v := range r.events {
		events[k] = v
	}
	body, _ := json.Marshal(report{
		Version: ProtocolVersion, Client: r.Client, Instance: r.Instance,
		Sequence: r.sequence, TimestampMs: time.Now().UnixMilli(),
		Subscriptions: r.subscriptions(), ConnectionEvents: events,
		JetStreamConsumers: []struct{}{},
	})
	return body, r.sequence
}

// PublishNow publishes one report on nc; it returns the report's sequence.
func (r *Reporter) PublishNow(nc *nats.Conn) (uint64, error) {
	body, sequence := r.encode()
	return sequence, nc.Publish(r.Subject+"."+r.Client, body)
}

// Start publishes a report on nc (connected) every Interval until Stop.
func (r *Reporter) Start(nc *nats.Conn) {
	r.mu.Lock()
	r.events["connected"]++
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	r.mu.Unlock()
	go func() {
		defer close(r.done)
		tick := time.NewTicker(r.Interval)
		defer tick.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-tick.C:
				// A report that cannot be sent costs nothing: the next one
				// carries the same totals and more.
				_, _ = r.PublishNow(nc)
			}
		}
	}()
}

// Stop stops the periodic reports; a report being published is finished.
func (r *Reporter) Stop() {
	if r.stop != nil {
		close(r.stop)
		<-r.done
		r.stop = nil
	}
}
