package httpapi

import (
	"context"
	"net/http"
)

// ProviderModels is what one configured provider offers, for GET /v1/models.
type ProviderModels struct {
	Provider string   `json:"provider"`
	Type     string   `json:"type"`
	Models   []string `json:"models"` // provider/model names
	// Source is "live" when Models come from the provider's own list, "config" otherwise.
	Source string `json:"source"`
	// Error says why the live list could not be read; Models are then the configured ones.
	Error string `json:"error,omitempty"`
}

// Catalog lists the models of every configured provider.
type Catalog func(ctx context.Context) []ProviderModels

// listModels answers GET /v1/models: every model as an object (OpenAI's list shape, so model pickers
// written for it work), the default model, and each provider's state.
func (s *server) listModels(w http.ResponseWriter, r *http.Request) error {
	type modelWire struct {
		ID       string `json:"id"`
		Object   string `json:"object"`
		Provider string `json:"provider"`
	}
	var providers []ProviderModels
	if s.Models != nil {
		providers = s.Models(r.Context())
	}
	if providers == nil {
		providers = []ProviderModels{} // a list, also when empty
	}
	data := []modelWire{}
	for _, p := range providers {
		for _, m := range p.Models {
			data = append(data, modelWire{ID: m, Object: "model", Provider: p.Provider})
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "default": s.DefaultModel, "providers": providers,
	})
}

// listAgents answers GET /v1/agents: the agents the caller may use (a key limited to some agents sees
// those), for a frontend's agent picker.
func (s *server) listAgents(w http.ResponseWriter, r *http.Request) error {
	infos := s.Chat.Agents(principal(r.Context()).AllowsAgent)
	out := make([]agentJSON, len(infos))
	for i := range infos {
		out[i] = agentOf(&infos[i])
	}
	return writeJSON(w, http.StatusOK, map[string]any{"agents": out})
}
