package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/retry"
)

func ExampleRetrier_Do() {
	r, err := retry.New(retry.DefaultConfig(), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		panic(err)
	}
	r.Sleep = func(context.Context, time.Duration) error { return nil } // no real waiting in the example

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := r.Do(ctx, "sonnet", func(ctx context.Context, attempt int) error {
		if attempt == 0 {
			return &provider.Error{Kind: provider.KindThrottled, Model: "sonnet"}
		}
		// A failure after the first byte reached the client must not be
		// retried: wrap it with retry.Final.
		return nil
	})
	switch {
	case errors.Is(err, retry.ErrPressureOpen):
		fmt.Println("skip to the next tier")
	case err != nil:
		fmt.Println("fall back:", err)
	}
	fmt.Println(rep.Attempts, rep.Retries, rep.Stop, rep.Level)
	// Output: 2 1 success SLIGHT
}
