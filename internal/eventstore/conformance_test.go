package eventstore_test

import (
	"testing"

	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		cfg := eventstore.DefaultConfig()
		cfg.Path = ":memory:"
		cfg.Retention = 0
		s, err := eventstore.Open(t.Context(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
