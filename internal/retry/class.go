package retry

import (
	"errors"

	"github.com/fmgate/fmgate/internal/provider"
)

// Classify returns the error class that governs a retry of err and whether
// err may be retried at all.
//
// throttled, unavailable, timeout and not_ready are retryable; validation,
// access_denied, not_found and canceled are not; guardrail never is (the same
// content is blocked again, and each try is billed). A *provider.Error of
// another kind is still retryable when its HTTP status is 429 or 5xx, and is
// then classed by that status. Errors wrapped with Final are never retryable.
func Classify(err error) (provider.Kind, bool) {
	kind := provider.KindOf(err)
	if err == nil {
		return kind, false
	}
	if IsFinal(err) {
		return kind, false
	}
	switch kind {
	case provider.KindThrottled, provider.KindUnavailable, provider.KindTimeout, provider.KindNotReady:
		return kind, true
	case provider.KindValidation, provider.KindAccessDenied, provider.KindNotFound,
		provider.KindCanceled, provider.KindGuardrail:
		return kind, false
	}
	var pe *provider.Error
	if errors.As(err, &pe) && (pe.Status == 429 || pe.Status >= 500 && pe.Status <= 599) {
		return provider.KindFromStatus(pe.Status), true
	}
	return kind, false
}

// OutcomeOf is what a call that failed with an error of this kind says
// about the model it was made to, as Retrier.Do records it to Pressure
// (a cancellation says nothing: Do records none).
func OutcomeOf(kind provider.Kind) Outcome { return outcomeOf(kind) }

// outcomeOf is what a failure of this kind says about the model.
func outcomeOf(kind provider.Kind) Outcome {
	switch {
	case kind == provider.KindThrottled:
		return OutcomeThrottled
	case blamesModel(kind):
		return OutcomeFailed
	}
	return OutcomeOK
}

// blamesModel reports whether a failure of this kind is evidence that the
// model is under pressure. A rejected request or a blocked answer means the
// model responded; a cancellation means the caller left.
func blamesModel(kind provider.Kind) bool {
	switch kind {
	case provider.KindValidation, provider.KindGuardrail, provider.KindCanceled:
		return false
	}
	return true
}
