package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
)

// The gateway asks the model's breaker before each call and reports the
// outcome; a refusal sends the turn straight to the next fallback tier.
func Example() {
	set := breaker.NewSet(breaker.MemoryFactory(time.Now), breaker.Defaults())
	ctx := context.Background()

	call := func(model string, fail bool) string {
		p, err := set.Get(model).Allow(ctx)
		var open *breaker.OpenError
		switch {
		case errors.As(err, &open):
			return fmt.Sprintf("%s %s: fall back", model, open.State)
		case err != nil:
			// The shared state is unreachable: call the model anyway.
		}
		p.Done(ctx, !fail)
		return model + ": called"
	}

	for range 5 {
		call("sonnet", true)
	}
	fmt.Println(call("sonnet", false))
	fmt.Println(call("haiku", false))
	// Output:
	// sonnet open: fall back
	// haiku: called
}
