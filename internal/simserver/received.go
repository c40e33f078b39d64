package simserver

import (
	"net/http"
	"sync"
)

// Received is what a vendor endpoint was sent beyond the call itself.
type Received struct {
	Path        string
	Traceparent string // the W3C traceparent header, "" when absent
}

// Recorder remembers the last requests a handler got (at most its bound),
// so that tests can assert what an adapter sent upstream, such as the
// model attempt's traceparent. It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	max  int
	last []Received
}

// NewRecorder returns a Recorder keeping the last max requests (256 when
// max <= 0).
func NewRecorder(max int) *Recorder {
	if max <= 0 {
		max = 256
	}
	return &Recorder{max: max}
}

// Wrap returns h, recording each request before h serves it.
func (r *Recorder) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.last = append(r.last, Received{Path: req.URL.Path, Traceparent: req.Header.Get("traceparent")})
		if len(r.last) > r.max {
			r.last = append(r.last[:0], r.last[len(r.last)-r.max:]...)
		}
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

// Last returns the recorded requests, oldest first.
func (r *Recorder) Last() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.last...)
}
