package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
)

// queueSize bounds the notifications waiting for delivery; past it a new
// notification is dropped and counted, so a dead receiver never grows
// memory.
const queueSize = 256

// maxBackoff caps the wait between delivery attempts.
const maxBackoff = 30 * time.Second

// NotifyStats counts deliveries over the process's life.
type NotifyStats struct {
	// Sent counts notifications a receiver accepted (2xx).
	Sent uint64 `json:"sent"`
	// Failed counts notifications given up after every attempt.
	Failed uint64 `json:"failed"`
	// Dropped counts notifications lost because the queue was full.
	Dropped uint64 `json:"dropped"`
}

type notifier struct {
	hooks       []Webhook
	externalURL string
	client      *http.Client
	log         *slog.Logger
	queue       chan Alert

	sent, failed, dropped atomic.Uint64
}

func newNotifier(hooks []Webhook, externalURL string, log *slog.Logger) *notifier {
	hs := make([]Webhook, len(hooks))
	for i, h := range hooks {
		hs[i] = h.withDefaults()
	}
	return &notifier{
		hooks:       hs,
		externalURL: externalURL,
		client:      &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}},
		log:         log,
		queue:       make(chan Alert, queueSize),
	}
}

func (n *notifier) stats() NotifyStats {
	return NotifyStats{Sent: n.sent.Load(), Failed: n.failed.Load(), Dropped: n.dropped.Load()}
}

// send queues a notification for every webhook, never blocking.
func (n *notifier) send(a Alert) {
	if len(n.hooks) == 0 {
		return
	}
	select {
	case n.queue <- a:
	default:
		n.dropped.Add(1)
		n.log.Warn("alert notification dropped: queue full", "alert", a.Name)
	}
}

// run delivers queued notifications until ctx ends.
func (n *notifier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-n.queue:
			body, err := json.Marshal(payload(a, n.externalURL))
			if err != nil {
				n.failed.Add(1)
				continue
			}
			for _, h := range n.hooks {
				if err := n.deliver(ctx, h, body); err != nil {
					n.failed.Add(1)
					n.log.Warn("alert notification failed", "alert", a.Name, "status", a.State, "err", err)
				} else {
					n.sent.Add(1)
				}
			}
		}
	}
}

// deliver posts body to h, retrying with doubling waits; a 4xx other than
// 408 and 429 is final.
func (n *notifier) deliver(ctx context.Context, h Webhook, body []byte) error {
	wait := 500 * time.Millisecond
	var last error
	for attempt := 1; attempt <= h.Attempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, maxBackoff)
		}
		status, err := n.post(ctx, h, body)
		switch {
		case err == nil && status/100 == 2:
			return nil
		case err == nil && status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			return fmt.Errorf("%s answered %d", h.URL, status)
		case err == nil:
			last = fmt.Errorf("%s answered %d", h.URL, status)
		default:
			last = err
		}
	}
	return fmt.Errorf("after %d attempts: %w", h.Attempts, last)
}

func (n *notifier) post(ctx context.Context, h Webhook, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fmgate-alerts")
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Message is the Alertmanager webhook payload (version 4): receivers built
// for Alertmanager read it unchanged. fmgate sends one alert per message,
// grouped by the alert's own labels.
type Message struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []MessageAlert    `json:"alerts"`
}

// MessageAlert is one alert of a Message.
type MessageAlert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

func payload(a Alert, externalURL string) Message {
	var starts, ends time.Time
	if a.StartsAt != nil {
		starts = *a.StartsAt
	}
	if a.EndsAt != nil {
		ends = *a.EndsAt
	}
	return Message{
		Version:           "4",
		GroupKey:          fmt.Sprintf("{}:{alertname=%q, fingerprint=%q}", a.Name, a.Fingerprint),
		Status:            a.State,
		Receiver:          "fmgate",
		GroupLabels:       map[string]string{"alertname": a.Name},
		CommonLabels:      a.Labels,
		CommonAnnotations: a.Annotations,
		ExternalURL:       externalURL,
		Alerts: []MessageAlert{{Status: a.State, Labels: a.Labels, Annotations: a.Annotations,
			StartsAt: starts, EndsAt: ends, GeneratorURL: externalURL, Fingerprint: a.Fingerprint}},
	}
}

// Handler serves GET /admin/alerts (mount it behind the admin token).
func (m *Manager) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = io.WriteString(w, `{"error":{"code":"method_not_allowed","message":"GET /admin/alerts lists the alerts; nothing else is allowed here."}}`+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(m.List())
	})
}
