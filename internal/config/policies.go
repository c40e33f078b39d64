package config

// Policies holds the configuration of each pipeline policy, in the
// package that implements it.
type Policies struct{}

func defaultPolicies() Policies { return Policies{} }

func (p Policies) validate(v *validator) {}
