package anthropic

import (
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
)

// modelsEpoch is the created_at of every model fmgate lists: its tiers
// have no release date of their own, and clients only sort by it.
var modelsEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// ModelInfo is a model as Anthropic's Models API shows it.
type ModelInfo struct {
	Type        string    `json:"type"`
	ID          string    `json:"id"`
	DisplayName string    `json:"display_name"`
	CreatedAt   time.Time `json:"created_at"`
}

// modelList is Anthropic's page of models; fmgate's tiers fit on one.
type modelList struct {
	Data    []ModelInfo `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID *string     `json:"first_id"`
	LastID  *string     `json:"last_id"`
}

func modelInfo(m config.Model) ModelInfo {
	name := m.Name
	if m.ModelID != "" {
		name += " (" + m.ModelID + ")"
	}
	return ModelInfo{Type: "model", ID: m.Name, DisplayName: name, CreatedAt: modelsEpoch}
}

// listModels answers GET /v1/models in Anthropic's shape: the model tiers
// the caller's API key may use, each by the name requests may use.
func (d *door) listModels(w http.ResponseWriter, r *http.Request) {
	var t gateway.Turn
	if err := d.authenticate(r, "", &t); err != nil {
		writeGatewayError(w, err)
		return
	}
	list := modelList{Data: []ModelInfo{}}
	for _, m := range d.g.Models() {
		if t.MayUse(m.Name) {
			list.Data = append(list.Data, modelInfo(m))
		}
	}
	if n := len(list.Data); n > 0 {
		list.FirstID, list.LastID = &list.Data[0].ID, &list.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, list)
}

// getModel answers GET /v1/models/{model}: a tier by its name, model id or
// alias.
func (d *door) getModel(w http.ResponseWriter, r *http.Request) {
	var t gateway.Turn
	if err := d.authenticate(r, "", &t); err != nil {
		writeGatewayError(w, err)
		return
	}
	m, ok := d.g.ResolveModel(r.PathValue("model"))
	if !ok {
		WriteError(w, &Error{Status: http.StatusNotFound, Type: ErrNotFound, Message: "model: " + r.PathValue("model") + " is not served here"})
		return
	}
	writeJSON(w, http.StatusOK, modelInfo(m))
}

// IsAnthropic reports whether r comes from an Anthropic client: the SDKs
// send anthropic-version on every request (and x-api-key by default).
func IsAnthropic(r *http.Request) bool {
	return r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != ""
}
