package server

import (
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/gateway"
)

// guardEdge refuses what no route can serve before routing, and bounds how
// long a client may take to send a request body.
//
// A path that is not UTF-8 once unescaped (GET /%ff) is a 400, never a file
// lookup that fails with a 500. A body must arrive within bodyTimeout of the
// request's start; a slower client (a slow-loris body) is cut with 408. The
// deadline is per request and ends with the body, so WebSockets and long SSE
// answers, which read no body while they stream, are not affected.
func guardEdge(bodyTimeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) {
			gateway.WriteError(w, &gateway.Error{Status: http.StatusBadRequest, Code: gateway.CodeInvalidRequest,
				Message: "The URL path is not valid UTF-8 once unescaped."})
			return
		}
		if r.Body != nil && r.Body != http.NoBody && bodyTimeout > 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline once the body has been
// read to its end, so that the rest of the request — a stream that may last
// minutes — runs without it. A body not read to its end keeps the deadline:
// the server discards what is left of it before answering, and must not
// wait for a client that stopped sending.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}
