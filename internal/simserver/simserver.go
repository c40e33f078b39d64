// Package simserver serves fmgate's model simulator over the vendors' own
// wire protocols — OpenAI Chat Completions and Embeddings, Anthropic
// Messages and the Bedrock Runtime Converse API and InvokeModel of Titan
// Text Embeddings v2 and Cohere Embed — so that every provider adapter is tested
// end to end through its vendor's real SDK, and so that `fmgate sim` can
// stand in for an upstream in load runs. Answers, pacing, usage and faults
// are the simulator's; faults come out in each vendor's own error shape.
package simserver

import (
	"encoding/json"
	"net/http"

	"github.com/fmgate/fmgate/internal/frontdoor/bedrock"
	"github.com/fmgate/fmgate/internal/frontdoor/openai"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// Handler serves s: the vendors' endpoints and the simulator's admin API
// (GET|PUT /admin/sim/{model}, unauthenticated: bind the simulator to
// loopback).
func Handler(s *sim.Sim) http.Handler {
	mux := http.NewServeMux()
	admin := s.Handler()
	mux.Handle("/admin/sim", admin)
	mux.Handle("/admin/sim/", admin)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
	})
	// The vendors' wire protocols.
	resolve := func(model string) (string, bool) { return Resolve(s, model) }
	oai := openai.Sim(s, resolve, nil)
	mux.Handle("POST /v1/chat/completions", oai)
	mux.Handle("POST /v1/embeddings", oai)
	mux.Handle("POST /v1/messages", anthropicMessages(s))
	mux.Handle("POST /v1/messages/count_tokens", anthropicCountTokens(s))
	mux.Handle("POST /model/", bedrock.Sim(s, func(model string) (string, bool) { return Resolve(s, model) }))
	return mux
}

// Resolve maps the model a vendor request names — a simulated model's name,
// or the model id it reports (its tier's modelId) — to the simulator's model
// name.
func Resolve(s *sim.Sim, model string) (string, bool) {
	for _, name := range s.Models() {
		if name == model {
			return name, true
		}
	}
	for _, name := range s.Models() {
		if st, ok := s.Settings(name); ok && st.ModelID == model {
			return name, true
		}
	}
	return "", false
}
