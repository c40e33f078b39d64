package main

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// credentialProblems resolves the credentials of the tiers whose vendor
// SDK finds its own (the AWS default chain for bedrock), one line per tier
// that has none, naming what to set. Each region is resolved once, within
// the provider's credential timeout.
func credentialProblems(ctx context.Context, cfg config.Config) []string {
	var lines []string
	checked := map[string]error{}
	for i, m := range cfg.Models {
		if m.Provider != "bedrock" || m.Region == "" {
			continue
		}
		err, ok := checked[m.Region]
		if !ok {
			err = bedrock.CheckCredentials(ctx, m)
			checked[m.Region] = err
		}
		if err != nil {
			lines = append(lines, fmt.Sprintf("models[%d] (%s): %v", i, m.Name, err))
		}
	}
	return lines
}
