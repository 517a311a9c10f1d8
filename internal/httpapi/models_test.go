package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/httpapi"
)

func TestListModels(t *testing.T) {
	e := newEnv(t, httpapi.Options{DefaultModel: "openai/gpt-4o-mini", Models: func(context.Context) []httpapi.ProviderModels {
		return []httpapi.ProviderModels{
			{Provider: "anthropic", Type: "anthropic", Models: []string{"anthropic/claude-sonnet-4-5"}, Source: "config", Error: "anthropic: auth (HTTP 401): invalid x-api-key"},
			{Provider: "openai", Type: "openai", Models: []string{"openai/gpt-4o", "openai/gpt-4o-mini"}, Source: "live"},
		}
	}})
	resp, raw := e.do(t, "GET", "/v1/models", "")
	var got struct {
		Object    string
		Default   string
		Data      []struct{ ID, Object, Provider string }
		Providers []httpapi.ProviderModels
	}
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %d %s", resp.StatusCode, raw)
	}
	var ids []string
	for _, m := range got.Data {
		ids = append(ids, m.Provider+" "+m.ID+" "+m.Object)
	}
	want := []string{"anthropic anthropic/claude-sonnet-4-5 model", "openai openai/gpt-4o model", "openai openai/gpt-4o-mini model"}
	if diff := cmp.Diff(want, ids); diff != "" || got.Object != "list" || got.Default != "openai/gpt-4o-mini" || len(got.Providers) != 2 || got.Providers[0].Error == "" {
		t.Errorf("models: %s (-want +got):\n%s", raw, diff)
	}

	empty := newEnv(t, httpapi.Options{Models: func(context.Context) []httpapi.ProviderModels { return nil }})
	if resp, raw := empty.do(t, "GET", "/v1/models", ""); resp.StatusCode != 200 || string(raw) != `{"data":[],"default":"","object":"list","providers":[]}`+"\n" {
		t.Errorf("no catalog: %d %s", resp.StatusCode, raw)
	}
}
