package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// namedTool is a tool that only has a name, and counts its calls.
type namedTool struct {
	name  string
	calls *atomic.Int32
}

func (n namedTool) Info() tool.Info {
	return tool.Info{Name: n.name, Description: "Does " + n.name + "."}
}

func (n namedTool) Call(context.Context, json.RawMessage) (tool.Result, error) {
	if n.calls != nil {
		n.calls.Add(1)
	}
	return tool.Result{Content: n.name + " done"}, nil
}

// scopedToolNames are the tools of the scope tests: current_time is global, srv__* belong to the reports
// page, other__x to its table tab, sql_run to that tab's sql subtab, settings_edit to the settings page's
// table tab; free_tool is in no scope.
var scopedToolNames = []string{"current_time", "free_tool", "other__x", "settings_edit", "sql_run", "srv__a", "srv__b"}

func scopedTools() []tool.Tool {
	var out []tool.Tool
	for _, n := range scopedToolNames {
		out = append(out, namedTool{name: n})
	}
	return out
}

func appScopes() *tool.Scopes {
	return &tool.Scopes{
		Global: []string{"current_time"},
		Pages: map[string]tool.PageScope{
			"reports": {Tools: []string{"srv__*"}, Tabs: map[string]tool.TabScope{
				"table": {Tools: []string{"other__x"}, Subtabs: map[string]tool.SubtabScope{
					"sql": {Tools: []string{"sql_run"}},
				}},
			}},
			"settings": {Tabs: map[string]tool.TabScope{"table": {Tools: []string{"settings_edit"}}}},
		},
	}
}

// newToolService is a service with the scope tests' tools and scopes (Options.Scopes), for Service.Tools.
func newToolService(t *testing.T, agents map[string]chat.Agent) (*chat.Service, *tool.Registry) {
	t.Helper()
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	for _, tl := range scopedTools() {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	svc := chat.New(chat.Options{Tools: reg, Agents: agents, Scopes: appScopes(), FlushInterval: -1})
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return svc, reg
}

func names(infos []tool.Info) []string {
	out := []string{}
	for _, i := range infos {
		out = append(out, i.Name)
	}
	return out
}

func TestVisibleTools(t *testing.T) {
	svc, _ := newToolService(t, map[string]chat.Agent{
		"listed": {Tools: []string{"srv__a", "other__*"}},
		"none":   {Tools: []string{}},
		"star":   {Tools: []string{"*"}},
		// Its own scopes replace the top-level ones.
		"own": {Scopes: &tool.Scopes{Pages: map[string]tool.PageScope{"p": {Tools: []string{"free_tool"}}}}},
	})
	reports := map[string]any{"page": "reports"}
	table := map[string]any{"page": "reports", "tab": "table"}
	sql := map[string]any{"page": "reports", "tab": "table", "subtab": "sql"}
	tests := []struct {
		name  string
		agent string
		ctx   map[string]any
		want  []string
	}{
		{"unscoped tools only", "", nil, []string{"current_time", "free_tool"}},
		{"default by name", "default", map[string]any{"page": "nowhere"}, []string{"current_time", "free_tool"}},
		{"page", "", reports, []string{"current_time", "free_tool", "srv__a", "srv__b"}},
		{"tab", "", table, []string{"current_time", "free_tool", "other__x", "srv__a", "srv__b"}},
		{"subtab", "", sql, []string{"current_time", "free_tool", "other__x", "sql_run", "srv__a", "srv__b"}},
		{"same tab name on another page", "", map[string]any{"page": "settings", "tab": "table", "subtab": "sql"},
			[]string{"current_time", "free_tool", "settings_edit"}},
		{"tab without its page", "", map[string]any{"tab": "table", "subtab": "sql"}, []string{"current_time", "free_tool"}},
		{"values not strings", "", map[string]any{"page": 1, "tab": true}, []string{"current_time", "free_tool"}},
		{"allow-list: names and patterns, plus global", "listed", nil, []string{"current_time", "other__x", "srv__a"}},
		{"allow-list plus page", "listed", reports, []string{"current_time", "other__x", "srv__a", "srv__b"}},
		{"empty allow-list: scopes only", "none", nil, []string{"current_time"}},
		{"empty allow-list plus subtab", "none", sql, []string{"current_time", "other__x", "sql_run", "srv__a", "srv__b"}},
		{"star", "star", nil, scopedToolNames},
		{"own scopes", "own", nil, []string{"current_time", "other__x", "settings_edit", "sql_run", "srv__a", "srv__b"}},
		{"own scopes, own page", "own", map[string]any{"page": "p"}, scopedToolNames},
		{"own scopes, top-level page", "own", reports, []string{"current_time", "other__x", "settings_edit", "sql_run", "srv__a", "srv__b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infos, err := svc.Tools(tt.agent, tt.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(infos)); diff != "" {
				t.Errorf("Tools(%q, %v) (-want +got):\n%s", tt.agent, tt.ctx, diff)
			}
		})
	}
}

func TestToolsUnknownAgent(t *testing.T) {
	svc, _ := newToolService(t, nil)
	_, err := svc.Tools("ghost", nil)
	if e, ok := errors.AsType[*chat.Error](err); !ok || e.Code != "unknown_agent" || !errors.Is(err, chat.ErrInvalid) {
		t.Errorf("err = %v, want an unknown_agent ErrInvalid", err)
	}
}

// TestToolsFollowTheRegistry: tools that appear or leave while chatd runs (an MCP server connecting) are
// seen by the next request.
func TestToolsFollowTheRegistry(t *testing.T) {
	svc, reg := newToolService(t, nil)
	reports := map[string]any{"page": "reports"}
	if err := reg.Register(namedTool{name: "srv__c"}); err != nil {
		t.Fatal(err)
	}
	infos, err := svc.Tools("", reports)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"current_time", "free_tool", "srv__a", "srv__b", "srv__c"}, names(infos)); diff != "" {
		t.Errorf("after a tool was added (-want +got):\n%s", diff)
	}
	if infos, _ = svc.Tools("", nil); strings.Contains(strings.Join(names(infos), ","), "srv__c") {
		t.Errorf("srv__c is bound to the reports page but shows elsewhere: %v", names(infos))
	}
}

// offered is the names of the tools the model was offered in an OpenAI request.
func offered(t *testing.T, req llmtest.Request) []string {
	t.Helper()
	out := []string{}
	for _, tl := range blocks(req.Body["tools"]) {
		fn, _ := tl["function"].(map[string]any)
		name, _ := fn["name"].(string)
		out = append(out, name)
	}
	return out
}

// TestRunOffersVisibleTools: what a run offers the model is the agent's visible tools in the request's
// context, narrowed by selected_tools, as the model's requests show.
func TestRunOffersVisibleTools(t *testing.T) {
	f := newFixture(t, setup{Tools: scopedTools(),
		Agents:  map[string]chat.Agent{"app": {Scopes: appScopes()}, "listed": {Tools: []string{"srv__b"}, Scopes: appScopes()}},
		Respond: func(int, llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: "ok"} }})
	table := map[string]any{"page": "reports", "tab": "table"}
	tests := []struct {
		name     string
		agent    string
		ctx      map[string]any
		selected []string
		want     []string
	}{
		{"no context", "app", nil, nil, []string{"current_time", "free_tool"}},
		{"tab", "app", table, nil, []string{"current_time", "free_tool", "other__x", "srv__a", "srv__b"}},
		{"selected", "app", table, []string{"srv__b", "current_time"}, []string{"current_time", "srv__b"}},
		{"selected twice", "app", table, []string{"srv__b", "srv__b"}, []string{"srv__b"}},
		{"none selected", "app", table, []string{}, []string{}},
		{"allow-list", "listed", nil, nil, []string{"current_time", "srv__b"}},
		{"allow-list, selected", "listed", nil, []string{"srv__b"}, []string{"srv__b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.up.Requests())
			st := f.send(t, chat.Request{Agent: tt.agent, Message: "hi", Context: tt.ctx, SelectedTools: tt.selected}, chat.StartOptions{})
			if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
				t.Fatalf("run: %+v %+v", o, o.Error)
			}
			reqs := f.up.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("%d model requests, want 1", len(reqs)-before)
			}
			req := reqs[before]
			if diff := cmp.Diff(tt.want, offered(t, req)); diff != "" {
				t.Errorf("tools offered (-want +got):\n%s", diff)
			}
			if _, ok := req.Body["tools"]; ok && len(tt.want) == 0 {
				t.Errorf("the request has a tools key with no tool: %s", req.Raw)
			}
		})
	}
}

// TestSelectedToolNotVisible: selecting a tool the agent does not offer in the request's context is the
// caller's error, and starts nothing.
func TestSelectedToolNotVisible(t *testing.T) {
	f := newFixture(t, setup{Tools: scopedTools(),
		Agents: map[string]chat.Agent{"app": {Scopes: appScopes()}, "listed": {Tools: []string{"srv__b"}}}})
	table := map[string]any{"page": "reports", "tab": "table"}
	tests := []struct {
		name     string
		agent    string
		ctx      map[string]any
		selected []string
		inMsg    []string
	}{
		{"unknown", "app", nil, []string{"nope"}, []string{`"nope"`, `"app"`, "GET /v1/tools"}},
		{"subtab tool on its tab", "app", table, []string{"current_time", "sql_run"},
			[]string{`"sql_run"`, `page "reports", tab "table"`}},
		{"page tool without the page", "app", nil, []string{"srv__a"}, []string{`"srv__a"`}},
		{"not in the allow-list", "listed", nil, []string{"srv__a"}, []string{`"srv__a"`, `"listed"`}},
		{"a pattern is not a name", "app", table, []string{"srv__*"}, []string{`"srv__*"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.svc.Start(t.Context(), user, chat.Request{Agent: tt.agent, Message: "hi", Context: tt.ctx,
				SelectedTools: tt.selected}, chat.StartOptions{})
			e, ok := errors.AsType[*chat.Error](err)
			if !ok || e.Code != "unknown_tool" || !errors.Is(err, chat.ErrInvalid) {
				t.Fatalf("err = %v, want an unknown_tool ErrInvalid", err)
			}
			for _, s := range tt.inMsg {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q lacks %q", e.Message, s)
				}
			}
		})
	}
	if n := len(f.up.Requests()); n != 0 {
		t.Errorf("%d model requests", n)
	}
}

// TestToolOutsideItsScopeDoesNotRun: a model that calls a tool bound to another page gets an error
// result, and the tool does not run.
func TestToolOutsideItsScopeDoesNotRun(t *testing.T) {
	var calls atomic.Int32
	f := newFixture(t, setup{Lenient: true, Tools: []tool.Tool{namedTool{name: "sql_run", calls: &calls}, namedTool{name: "current_time"}},
		Agents: map[string]chat.Agent{"app": {Scopes: appScopes()}},
		Turns: []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "sql_run", Arguments: `{}`}}},
			{Text: "done"},
		}})
	st := f.send(t, chat.Request{Agent: "app", Message: "run it", Context: map[string]any{"page": "reports"}}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if calls.Load() != 0 {
		t.Errorf("sql_run ran %d times outside its subtab", calls.Load())
	}
	reqs := f.up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	if diff := cmp.Diff([]string{"current_time"}, offered(t, reqs[0])); diff != "" {
		t.Errorf("tools offered (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(reqs[1].Raw), `unknown tool \"sql_run\"`) {
		t.Errorf("the model was not told sql_run is unknown: %s", reqs[1].Raw)
	}
}

// BenchmarkTools measures resolving an agent's tools for a request context: what every run and every
// GET /v1/tools does.
func BenchmarkTools(b *testing.B) {
	reg := tool.NewRegistry(tool.Options{})
	defer reg.Close()
	for _, server := range []string{"srv", "other", "docs", "files"} {
		for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
			if err := reg.Register(namedTool{name: server + "__" + n}); err != nil {
				b.Fatal(err)
			}
		}
	}
	svc := chat.New(chat.Options{Tools: reg, Scopes: appScopes(), FlushInterval: -1})
	defer svc.Close(context.Background())
	ctx := map[string]any{"page": "reports", "tab": "table", "subtab": "sql"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.Tools("", ctx); err != nil {
			b.Fatal(err)
		}
	}
}
