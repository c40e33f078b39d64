package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fmgate/fmgate/internal/provider"
)

// maxPatchBytes bounds a PUT body; real settings are a few hundred bytes.
const maxPatchBytes = 64 << 10

// Handler serves the simulator's admin API. The gateway mounts it under
// /admin/ behind its own authentication:
//
//	GET /admin/sim           settings of every model, by name
//	GET /admin/sim/{model}   the model's settings (JSON, Settings' names)
//	PUT /admin/sim/{model}   change them: fields present in the body replace
//	                         the current values, absent ones are kept
//
// Errors are {"error":{"code":…,"message":…}}: 400 invalid_request for a
// malformed body, an unknown field or a failed validation, 404 not_found for
// an unknown model.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/sim", s.handleList)
	mux.HandleFunc("GET /admin/sim/{model}", s.handleGet)
	mux.HandleFunc("PUT /admin/sim/{model}", s.handlePut)
	return mux
}

func (s *Sim) handleList(w http.ResponseWriter, _ *http.Request) {
	all := make(map[string]Settings)
	for _, name := range s.Models() {
		if st, ok := s.Settings(name); ok {
			all[name] = st
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": all})
}

func (s *Sim) handleGet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	st, ok := s.Settings(name)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no simulated model %q", name))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Sim) handlePut(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	cur, ok := s.Settings(name)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no simulated model %q", name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPatchBytes))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds %d bytes", mbe.Limit))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("read body: %v", err))
		return
	}
	patch, err := decodePatch(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	next := patch.apply(cur)
	// Another PUT may land between Settings and SetSettings; the last one
	// wins, which is what an operator toggling faults expects.
	if err := s.SetSettings(name, next); err != nil {
		if errors.Is(err, ErrUnknownModel) {
			writeError(w, http.StatusNotFound, "not_found", err.Error())
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", joinLines(err))
		return
	}
	writeJSON(w, http.StatusOK, next.clone())
}

// settingsPatch is a PUT body: nil fields were absent and keep their value.
// A present errorRate replaces the whole map, so {"errorRate":{}} clears it.
type settingsPatch struct {
	ModelID          *string                    `json:"modelId"`
	Outage           *bool                      `json:"outage"`
	ErrorRate        *map[provider.Kind]float64 `json:"errorRate"`
	LatencyMs        *int                       `json:"latencyMs"`
	TTFTMs           *int                       `json:"ttftMs"`
	TokensPerSecond  *float64                   `json:"tokensPerSecond"`
	StallAfterTokens *int                       `json:"stallAfterTokens"`
	CutAfterTokens   *int                       `json:"cutAfterTokens"`
	TPMCeiling       *int                       `json:"tpmCeiling"`
	CacheMinTokens   *int                       `json:"cacheMinTokens"`
}

// decodePatch parses a PUT body: exactly one JSON object with no fields
// other than Settings' own. A null field counts as absent.
func decodePatch(body []byte) (settingsPatch, error) {
	var p settingsPatch
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return settingsPatch{}, fmt.Errorf("body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return settingsPatch{}, errors.New("body: want a single JSON object")
	}
	return p, nil
}

func (p settingsPatch) apply(s Settings) Settings {
	set(&s.ModelID, p.ModelID)
	set(&s.Outage, p.Outage)
	set(&s.ErrorRate, p.ErrorRate)
	set(&s.LatencyMs, p.LatencyMs)
	set(&s.TTFTMs, p.TTFTMs)
	set(&s.TokensPerSecond, p.TokensPerSecond)
	set(&s.StallAfterTokens, p.StallAfterTokens)
	set(&s.CutAfterTokens, p.CutAfterTokens)
	set(&s.TPMCeiling, p.TPMCeiling)
	set(&s.CacheMinTokens, p.CacheMinTokens)
	return s
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// joinLines flattens errors.Join's newlines into one message line.
func joinLines(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	writeJSON(w, status, map[string]body{"error": {Code: code, Message: msg}})
}
