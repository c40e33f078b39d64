package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
)

func perr(kind provider.Kind) error { return &provider.Error{Kind: kind, Model: "sonnet"} }

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		give      error
		wantClass provider.Kind
		wantRetry bool
	}{
		{"throttled", perr(provider.KindThrottled), provider.KindThrottled, true},
		{"unavailable", perr(provider.KindUnavailable), provider.KindUnavailable, true},
		{"timeout", perr(provider.KindTimeout), provider.KindTimeout, true},
		{"not ready", perr(provider.KindNotReady), provider.KindNotReady, true},
		{"wrapped throttled", fmt.Errorf("bedrock: converse: %w", perr(provider.KindThrottled)), provider.KindThrottled, true},
		{"deadline exceeded", context.DeadlineExceeded, provider.KindTimeout, true},
		{"validation", perr(provider.KindValidation), provider.KindValidation, false},
		{"access denied", perr(provider.KindAccessDenied), provider.KindAccessDenied, false},
		{"not found", perr(provider.KindNotFound), provider.KindNotFound, false},
		{"canceled", context.Canceled, provider.KindCanceled, false},
		{"guardrail", perr(provider.KindGuardrail), provider.KindGuardrail, false},
		{"guardrail with 5xx status", &provider.Error{Kind: provider.KindGuardrail, Status: 503}, provider.KindGuardrail, false},
		{"validation with 429 status", &provider.Error{Kind: provider.KindValidation, Status: 429}, provider.KindValidation, false},
		{"unknown with 429", &provider.Error{Kind: provider.KindUnknown, Status: 429}, provider.KindThrottled, true},
		{"unknown with 502", &provider.Error{Kind: provider.KindUnknown, Status: 502}, provider.KindUnavailable, true},
		{"unknown with 504", &provider.Error{Kind: provider.KindUnknown, Status: 504}, provider.KindTimeout, true},
		{"unknown with 418", &provider.Error{Kind: provider.KindUnknown, Status: 418}, provider.KindUnknown, false},
		{"plain error", errors.New("boom"), provider.KindUnknown, false},
		{"final throttled", Final(perr(provider.KindThrottled)), provider.KindThrottled, false},
		{"final wrapped again", fmt.Errorf("stream: %w", Final(perr(provider.KindUnavailable))), provider.KindUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, retry := Classify(tt.give)
			if class != tt.wantClass || retry != tt.wantRetry {
				t.Errorf("Classify = (%s, %v), want (%s, %v)", class, retry, tt.wantClass, tt.wantRetry)
			}
		})
	}
}

func TestFinal(t *testing.T) {
	if Final(nil) != nil {
		t.Fatal("Final(nil) != nil")
	}
	inner := &provider.Error{Kind: provider.KindUnavailable, RetryAfter: 7}
	err := fmt.Errorf("gateway: %w", Final(inner))
	if !IsFinal(err) || !errors.Is(err, ErrFinal) {
		t.Error("wrapped Final error not recognised")
	}
	var pe *provider.Error
	if !errors.As(err, &pe) || pe != inner || provider.RetryAfterOf(err) != 7 {
		t.Error("Final hides the provider error")
	}
	if err.Error() != "gateway: "+inner.Error() {
		t.Errorf("message changed: %q", err.Error())
	}
	if IsFinal(inner) {
		t.Error("plain error reported final")
	}
}
