package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Handler serves, with full paths (mount it at both, unstripped):
//
//   - GET /admin/live: Server-Sent Events. First "event: history" with data
//     {"snapshots":[Snapshot,...]} (the history, oldest first), then
//     "event: snapshot" with one Snapshot per Interval, and a ": ping"
//     comment every 15 s. The stream ends when the client goes or Run
//     returns. Beyond MaxSubscribers open streams: 503 with
//     {"error":{"code":"overloaded",...}}; after Run has returned: 503
//     unavailable.
//   - GET /admin/live/snapshot: the current Snapshot as JSON.
//
// It does no authentication: the gateway's admin middleware goes in front.
func (a *Aggregator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/live", "/admin/live/snapshot":
		default:
			writeError(w, http.StatusNotFound, "not_found", "no such live endpoint")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
			return
		}
		if r.URL.Path == "/admin/live/snapshot" {
			a.serveSnapshot(w, r)
			return
		}
		a.serveStream(w, r)
	})
}

func (a *Aggregator) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(a.Snapshot(r.Context()))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "cannot encode the snapshot")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

func (a *Aggregator) serveStream(w http.ResponseWriter, r *http.Request) {
	sub, hist, err := a.subscribe()
	switch {
	case errors.Is(err, errOverloaded):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "overloaded", "too many live dashboards are open; close one or retry later")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable", "live figures are shutting down")
		return
	}
	defer a.unsubscribe(sub)

	rc := http.NewResponseController(w)
	// A server-wide write timeout must not cut a stream that is meant to
	// stay open; each write below is small.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}

	var buf bytes.Buffer
	buf.WriteString("event: history\ndata: {\"snapshots\":[")
	for i, enc := range hist {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(enc)
	}
	buf.WriteString("]}\n\n")
	if !send(w, rc, buf.Bytes()) {
		return
	}

	ping := time.NewTicker(a.pingEach)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-a.done:
			return
		case <-ping.C:
			if !send(w, rc, []byte(": ping\n\n")) {
				return
			}
		case enc := <-sub.frames:
			buf.Reset()
			buf.WriteString("event: snapshot\ndata: ")
			buf.Write(enc)
			buf.WriteString("\n\n")
			if !send(w, rc, buf.Bytes()) {
				return
			}
		}
	}
}

// send writes one SSE block and flushes it; false when the client is gone.
func send(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
