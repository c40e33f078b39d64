package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// credentialProblems resolves the credentials of the tiers whose vendor
// SDK finds its own (the AWS default chain for bedrock), and of the
// Bedrock guardrail check, one line per tier or check that has none,
// naming what to set. Each region and AWS profile is resolved once, within
// the provider's credential timeout; a tier's deployments are checked as
// tiers of their own.
func credentialProblems(ctx context.Context, cfg config.Config) []string {
	var lines []string
	checked := map[string]error{}
	check := func(field string, m config.Model) {
		if m.Provider != "bedrock" || m.Region == "" {
			return
		}
		key := m.Region + "\x00" + m.AWSProfile
		err, ok := checked[key]
		if !ok {
			err = bedrock.CheckCredentials(ctx, m)
			checked[key] = err
		}
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s (%s): %v", field, m.Name, err))
		}
	}
	for i, m := range cfg.Models {
		if len(m.Deployments) == 0 {
			check(fmt.Sprintf("models[%d]", i), m)
		}
		for j, d := range m.Deployments {
			check(fmt.Sprintf("models[%d].deployments[%d]", i, j), m.Deployment(d))
		}
	}
	for i, e := range cfg.Embeddings {
		check(fmt.Sprintf("embeddings[%d]", i), e.Connection())
	}
	remotes := cfg.Guardrails.Remotes()
	for _, profile := range slices.Sorted(maps.Keys(remotes)) {
		g, field := remotes[profile], "guardrails.bedrock"
		if profile != "" {
			field = "guardrails.profiles." + profile + ".bedrock"
		}
		check(field, config.Model{Name: g.GuardrailID, Provider: "bedrock", Region: g.Region})
	}
	return lines
}
