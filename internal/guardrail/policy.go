package guardrail

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Policy is the guardrails of every turn: the set of checks in force
// (Config, the top level of guardrails), and named profiles of other sets
// that an API key, a feature or a route chooses instead — card numbers
// redacted everywhere, say, and for the storefront key e-mail addresses and
// phone numbers too, with a Bedrock guardrail.
type Policy struct {
	Config `yaml:",inline"`
	// Profiles are named sets of checks, each as the top level is (e-mail,
	// phone, card, myNumber, postalCode, denyTerms, denyAction, answers,
	// bedrock), a turn is held to instead of the top level's when its API
	// key (auth.keys.*.guardrails, a run-time key's guardrails), its
	// feature (features) or its route (routes) names one, in that order. A
	// profile names every check it makes: nothing is inherited from the
	// top level. A profile's Bedrock guardrail is reached with its own
	// client and breaker ("guardrail:<profile>"). Default: none.
	Profiles map[string]Config `yaml:"profiles"`
	// Features maps a turn's feature (attribution) to the profile its
	// turns are checked under. Default: none.
	Features map[string]string `yaml:"features"`
	// Routes maps a rate-limit route (sendMessage: fmgate's own chat;
	// chat: the vendor front doors; batch: batch items) to the profile its
	// turns are checked under. Default: none.
	Routes map[string]string `yaml:"routes"`
}

// DefaultPolicy holds every turn to DefaultConfig.
func DefaultPolicy() Policy { return Policy{Config: DefaultConfig()} }

// Routes a profile may be chosen for.
var routes = []string{"sendMessage", "chat", "batch"}

// Validate names each problem of the top level's checks, of each profile
// (under "profiles.<name>.") and each choice of a profile that does not
// exist.
func (p Policy) Validate() error {
	var errs []error
	if err := p.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Profiles)) {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, " :") {
			errs = append(errs, fmt.Errorf("profiles: %q is not a profile name (letters, digits, - and _)", name))
		}
		if err := p.Profiles[name].Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				errs = append(errs, fmt.Errorf("profiles.%s.%s", name, line))
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(p.Features)) {
		if err := p.CheckProfile(p.Features[f]); err != nil {
			errs = append(errs, fmt.Errorf("features.%s: %w", f, err))
		}
	}
	for _, r := range slices.Sorted(maps.Keys(p.Routes)) {
		if !slices.Contains(routes, r) {
			errs = append(errs, fmt.Errorf("routes.%s: not a route (use one of %s)", r, strings.Join(routes, ", ")))
		}
		if err := p.CheckProfile(p.Routes[r]); err != nil {
			errs = append(errs, fmt.Errorf("routes.%s: %w", r, err))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// CheckProfile reports whether profile names one of p's profiles.
func (p Policy) CheckProfile(profile string) error {
	if _, ok := p.Profiles[profile]; ok {
		return nil
	}
	if len(p.Profiles) == 0 {
		return fmt.Errorf("no guardrails profile named %q (guardrails.profiles lists none)", profile)
	}
	return fmt.Errorf("no guardrails profile named %q (want one of %s)", profile, strings.Join(slices.Sorted(maps.Keys(p.Profiles)), ", "))
}

// For is the set of checks a turn is held to, and its profile's name (""
// for the top level): its key's profile, else its feature's, else its
// route's, else the top level. A name that is not a profile (a key
// changed since the config was checked) chooses nothing.
func (p Policy) For(key, feature, route string) (string, Config) {
	for _, name := range []string{key, p.Features[feature], p.Routes[route]} {
		if c, ok := p.Profiles[name]; ok && name != "" {
			return name, c
		}
	}
	return "", p.Config
}

// Remotes are the Bedrock guardrails of p by profile ("" for the top
// level's), for those that have one.
func (p Policy) Remotes() map[string]BedrockConfig {
	out := map[string]BedrockConfig{}
	if p.Bedrock.Enabled() {
		out[""] = p.Bedrock
	}
	for name, c := range p.Profiles {
		if c.Bedrock.Enabled() {
			out[name] = c.Bedrock
		}
	}
	return out
}
