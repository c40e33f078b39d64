package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Stable error codes clients branch on.
const (
	CodeInvalidRequest = "invalid_request"
	CodeTooLarge       = "too_large"
	CodeRequestTimeout = "request_timeout"
	CodeNotAllowed     = "method_not_allowed"
	CodeUnauthorized   = "unauthorized"
	CodeModelForbidden = "model_not_allowed"
	CodeNotFound       = "not_found"
	CodeDuplicate      = "duplicate_request"
	CodeRateLimited    = "rate_limited"
	CodeQuotaExhausted = "quota_exhausted"
	CodeQueueFull      = "queue_full"
	CodeQueueTimeout   = "queue_timeout"
	CodeBudgetExceeded = "budget_exceeded"
	CodeShuttingDown   = "shutting_down"
	CodeUpstream       = "upstream_failed"
	CodeStreamTimeout  = "stream_timeout"
	CodeSlowClient     = "slow_client"
	CodeCanceled       = "canceled"
	// CodeAnswerWithheld ends a streamed answer the guardrails stopped
	// part-way: the rest held a finding to block.
	CodeAnswerWithheld = "answer_withheld"
	CodeInternal       = "internal"
	// CodeGuardrailUnavailable refuses a turn whose guardrail check by a
	// service (guardrails.bedrock, onError closed) could not be made.
	CodeGuardrailUnavailable = "guardrail_unavailable"
	// CodeUnavailable: a shared store the request needs cannot be reached.
	CodeUnavailable = "unavailable"
)

// Error is the one error type at the HTTP/WebSocket edge: a status, a stable
// code, a message safe to show users, and the internal cause for the log.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when set, is sent as Retry-After / retryAfterSeconds.
	RetryAfter time.Duration
	// Header holds extra response headers (e.g. RateLimit-Policy).
	Header http.Header
	// Param, when set, names the request field at fault ("dimensions",
	// "input"), for a door whose error shape names it.
	Param string
	Err   error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// RetryAfterSeconds rounds RetryAfter up to whole seconds, at least 1 when set.
func (e *Error) RetryAfterSeconds() int {
	if e.RetryAfter <= 0 {
		return 0
	}
	s := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// asEdgeError turns any error into an *Error; unknown errors become a 500
// whose message hides the cause.
func asEdgeError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: "Something went wrong on our side. Please try again.", Err: err}
}
