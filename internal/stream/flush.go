package stream

import (
	"errors"
	"io"
	"net/http"
)

// WriteFlush writes buf to w in one write and flushes the connection
// through rc, as a door does once a frame's events are encoded; a
// connection that cannot flush is not an error.
func WriteFlush(w io.Writer, rc *http.ResponseController, buf []byte) error {
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
