package provider

import (
	"net/http"
)

// SendWhole lets net/http write a request's headers and its in-memory body
// in one write, so that a call is one TCP segment and one system call
// rather than two. The vendors' Go SDKs wrap the body they hold in memory
// in a reader of their own, which net/http cannot tell from a streamed
// body, so it flushes the headers first "in case the body blocks"; a
// replayable body (GetBody, the SDKs set it for bytes) is swapped back for
// the in-memory reader GetBody returns. Call it from an SDK middleware,
// which owns the attempt's request (openai-go needs it; anthropic-sdk-go
// passes its body as is).
func SendWhole(req *http.Request) {
	if req.GetBody == nil || req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 {
		return
	}
	b, err := req.GetBody()
	if err != nil {
		return // the wrapped body still sends, in two writes
	}
	_ = req.Body.Close()
	req.Body = b
}
