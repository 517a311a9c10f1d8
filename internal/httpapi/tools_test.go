package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/tool"
)

type nameOnly string

func (n nameOnly) Info() tool.Info {
	return tool.Info{Name: string(n), Description: "Does " + string(n) + "."}
}

func (n nameOnly) Call(context.Context, json.RawMessage) (tool.Result, error) {
	return tool.Result{Content: "done"}, nil
}

// newToolsServer serves the API of a service whose tools are scoped: current_time is global, srv__* are
// the reports page's, other__x its table tab's, sql_run that tab's sql subtab's.
func newToolsServer(t *testing.T) *httptest.Server {
	t.Helper()
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	for _, n := range []string{"current_time", "free_tool", "other__x", "sql_run", "srv__a", "srv__b"} {
		if err := reg.Register(nameOnly(n)); err != nil {
			t.Fatal(err)
		}
	}
	scopes := &tool.Scopes{Global: []string{"current_time"}, Pages: map[string]tool.PageScope{
		"reports": {Tools: []string{"srv__*"}, Tabs: map[string]tool.TabScope{
			"table": {Tools: []string{"other__x"}, Subtabs: map[string]tool.SubtabScope{"sql": {Tools: []string{"sql_run"}}}},
		}},
	}}
	svc := chat.New(chat.Options{Tools: reg, Scopes: scopes, FlushInterval: -1,
		Agents: map[string]chat.Agent{"listed": {Tools: []string{"srv__a"}}}})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Tools: reg}))
	t.Cleanup(func() {
		srv.Close()
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close chat: %v", err)
		}
	})
	return srv
}

func getTools(t *testing.T, srv *httptest.Server, query string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/tools?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("GET /v1/tools?%s: %v", query, err)
	}
	return resp.StatusCode, raw
}

func TestToolsByContext(t *testing.T) {
	srv := newToolsServer(t)
	ctxParam := func(v string) string { return "context=" + url.QueryEscape(v) }
	tests := []struct {
		name  string
		query string
		want  []string
	}{
		{"no context", "", []string{"current_time", "free_tool"}},
		{"context page", ctxParam(`{"page":"reports","user":"ada"}`), []string{"current_time", "free_tool", "srv__a", "srv__b"}},
		{"context subtab", ctxParam(`{"page":"reports","tab":"table","subtab":"sql"}`),
			[]string{"current_time", "free_tool", "other__x", "sql_run", "srv__a", "srv__b"}},
		{"shorthand", "page=reports&tab=table", []string{"current_time", "free_tool", "other__x", "srv__a", "srv__b"}},
		{"shorthand overrides context", ctxParam(`{"page":"settings","tab":"table"}`) + "&page=reports",
			[]string{"current_time", "free_tool", "other__x", "srv__a", "srv__b"}},
		{"shorthand overrides with nothing", ctxParam(`{"page":"reports","tab":"table"}`) + "&tab=",
			[]string{"current_time", "free_tool", "srv__a", "srv__b"}},
		{"agent", "agent=listed", []string{"current_time", "srv__a"}},
		{"agent and context", "agent=listed&" + ctxParam(`{"page":"reports","tab":"table"}`),
			[]string{"current_time", "other__x", "srv__a", "srv__b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, raw := getTools(t, srv, tt.query)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, raw)
			}
			var body struct {
				Tools []struct {
					Name        string          `json:"name"`
					Description string          `json:"description"`
					InputSchema json.RawMessage `json:"input_schema"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, tl := range body.Tools {
				got = append(got, tl.Name)
				if tl.Description == "" || len(tl.InputSchema) == 0 {
					t.Errorf("tool %s lacks its description or schema: %s", tl.Name, raw)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolsBadQuery(t *testing.T) {
	srv := newToolsServer(t)
	tests := []struct {
		name   string
		query  string
		status int
		code   string
	}{
		{"not JSON", "context=" + url.QueryEscape(`{"page":`), 400, "invalid_context"},
		{"array", "context=" + url.QueryEscape(`["reports"]`), 400, "invalid_context"},
		{"string", "context=" + url.QueryEscape(`"reports"`), 400, "invalid_context"},
		{"null", "context=null", 400, "invalid_context"},
		{"too large", "context=" + url.QueryEscape(`{"page":"`+strings.Repeat("x", 16<<10)+`"}`), 400, "invalid_context"},
		{"unknown agent", "agent=ghost", 400, "unknown_agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, raw := getTools(t, srv, tt.query)
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if status != tt.status || body.Error.Code != tt.code || body.Error.Message == "" {
				t.Errorf("status %d %s, want %d %s", status, raw, tt.status, tt.code)
			}
		})
	}
	_, raw := getTools(t, srv, "context="+url.QueryEscape(`{"page":"`+strings.Repeat("x", 16<<10)+`"}`))
	if !strings.Contains(string(raw), "16 KiB") {
		t.Errorf("the message does not give the limit: %s", raw)
	}
}
