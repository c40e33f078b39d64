package breaker

import (
	"testing"
)

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		c := newFakeClock()
		return harness{factory: MemoryFactory(c.Now), advance: c.Advance}
	})
}
