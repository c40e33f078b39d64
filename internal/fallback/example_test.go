package fallback_test

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/fallback"
)

// The gateway stores full model answers and, when no model answers, asks the
// resolver for the best non-model answer for the failure it saw.
func Example() {
	cfg := fallback.DefaultConfig()
	r, err := fallback.New(cfg, fallback.Deps{Cache: fallback.NewCache(cfg, nil, "", nil)})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	q := fallback.Question{Text: "Is Chainsaw Man volume 17 out?", Locale: "en", PromptVersion: "v3"}
	r.Store(ctx, q, "Yes, volume 17 came out last week.")

	for _, tt := range []struct {
		q      fallback.Question
		reason fallback.Reason
	}{
		{q, fallback.ReasonCircuitOpen},
		{fallback.Question{Text: "送料はいくらですか？", Locale: "ja"}, fallback.ReasonError},
		{q, fallback.ReasonGuardrail},
	} {
		a := r.Answer(ctx, tt.q, tt.reason)
		fmt.Printf("%s %.1f degraded=%v: %s\n", a.Tier, a.Confidence, a.Degraded, a.Text)
	}
	// Output:
	// cache 0.5 degraded=true: Yes, volume 17 came out last week.
	// faq 0.3 degraded=true: 国内の通常配送は3〜5営業日でお届けします。海外発送は一部の国に対応しており、通常7〜14営業日かかります。
	// graceful 0.1 degraded=true: I cannot help with that request. Try searching manga, checking orders, or asking for recommendations.
}
