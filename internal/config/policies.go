package config

import (
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/stream"
)

// Policies holds the configuration of each pipeline policy, defined in the
// package that implements it.
type Policies struct {
	// Sim configures the built-in model simulator per model.
	Sim sim.Config `yaml:"sim"`
	// Stream configures chunk aggregation, heartbeats and backpressure.
	Stream stream.Config `yaml:"stream"`
}

func defaultPolicies() Policies {
	return Policies{
		Sim:    sim.DefaultConfig(),
		Stream: stream.DefaultConfig(),
	}
}

func (p Policies) validate(v *validator) {
	v.sub("sim", p.Sim.Validate())
	v.sub("stream", p.Stream.Validate())
}
