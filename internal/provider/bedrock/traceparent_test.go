package bedrock_test

import (
	"testing"

	"github.com/fmgate/fmgate/internal/provider/providertest"
)

// TestSendsTheAttemptsTraceparent: every call, streamed or not, carries
// the model attempt's traceparent upstream through the vendor's own SDK.
func TestSendsTheAttemptsTraceparent(t *testing.T) {
	url, rec := providertest.RecordingSim(t, "sonnet", sonnetID)
	providertest.SendsTheAttemptsTraceparent(t, newProvider(t, url), rec, request("hi"))
}
