package tool

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"current_time", "current_time", true},
		{"current_time", "current_time2", false},
		{"current_tim", "current_time", false},
		{"srv__*", "srv__a", true},
		{"srv__*", "srv__", true},
		{"srv__*", "srv_a", false},
		{"srv__*", "other__x", false},
		{"*", "anything", true},
		{"", "current_time", false},
		{"", "", false},
		{"srv__a", "", false},
		{"s*v__a", "srv__a", false},
		{"s*v__*", "srv__a", false},
		{"**", "srv__a", false},
		{"*srv__a", "srv__a", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	for _, p := range []string{"current_time", "srv__*", "*"} {
		if err := CheckPattern(p); err != nil {
			t.Errorf("CheckPattern(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", "s*v", "*srv", "**", "a*b*"} {
		err := CheckPattern(p)
		if err == nil {
			t.Errorf("CheckPattern(%q) accepts it", p)
			continue
		}
		if p != "" && !strings.Contains(err.Error(), `"`+p+`"`) {
			t.Errorf("CheckPattern(%q) = %v: the message does not name the pattern", p, err)
		}
	}
}

func TestScopesCheck(t *testing.T) {
	var nilScopes *Scopes
	if err := nilScopes.Check(); err != nil {
		t.Errorf("nil: %v", err)
	}
	if err := testScopes().Check(); err != nil {
		t.Errorf("valid scopes: %v", err)
	}
	tests := []struct {
		name  string
		s     Scopes
		where string
	}{
		{"global", Scopes{Global: []string{"a*b"}}, "global: "},
		{"page", Scopes{Pages: map[string]PageScope{"p": {Tools: []string{"*x"}}}}, "pages.p: "},
		{"tab", Scopes{Pages: map[string]PageScope{"p": {Tabs: map[string]TabScope{"t": {Tools: []string{""}}}}}}, "pages.p.tabs.t: "},
		{"subtab", Scopes{Pages: map[string]PageScope{"p": {Tabs: map[string]TabScope{"t": {
			Subtabs: map[string]SubtabScope{"s": {Tools: []string{"x**"}}}}}}}}, "pages.p.tabs.t.subtabs.s: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Check()
			if err == nil || !strings.HasPrefix(err.Error(), tt.where) {
				t.Errorf("Check() = %v, want an error starting with %q", err, tt.where)
			}
		})
	}
}

// testScopes is an application with a reports page (its table tab, that tab's sql subtab) and a
// settings page whose tab is also called table.
func testScopes() *Scopes {
	return &Scopes{
		Global: []string{"current_time"},
		Pages: map[string]PageScope{
			"reports": {Tools: []string{"srv__*"}, Tabs: map[string]TabScope{
				"table": {Tools: []string{"table_edit"}, Subtabs: map[string]SubtabScope{
					"sql": {Tools: []string{"sql_run", "sql_explain"}},
				}},
			}},
			"settings": {Tabs: map[string]TabScope{
				"table": {Tools: []string{"settings_table"}, Subtabs: map[string]SubtabScope{
					"sql": {Tools: []string{"settings_sql"}},
				}},
			}},
		},
	}
}

func TestActive(t *testing.T) {
	s := testScopes()
	tests := []struct {
		name string
		ctx  map[string]any
		want []string
	}{
		{"no context", nil, []string{"current_time"}},
		{"unknown page", map[string]any{"page": "nowhere", "tab": "table"}, []string{"current_time"}},
		{"page", map[string]any{"page": "reports"}, []string{"current_time", "srv__*"}},
		{"tab", map[string]any{"page": "reports", "tab": "table"}, []string{"current_time", "srv__*", "table_edit"}},
		{"subtab", map[string]any{"page": "reports", "tab": "table", "subtab": "sql"},
			[]string{"current_time", "srv__*", "table_edit", "sql_run", "sql_explain"}},
		{"tab without page", map[string]any{"tab": "table", "subtab": "sql"}, []string{"current_time"}},
		{"subtab without tab", map[string]any{"page": "reports", "subtab": "sql"}, []string{"current_time", "srv__*"}},
		{"tab of another page", map[string]any{"page": "settings", "tab": "table", "subtab": "sql"},
			[]string{"current_time", "settings_table", "settings_sql"}},
		{"unknown tab", map[string]any{"page": "reports", "tab": "chart", "subtab": "sql"}, []string{"current_time", "srv__*"}},
		{"not strings", map[string]any{"page": []any{"reports"}, "tab": 1.0}, []string{"current_time"}},
		{"tab not a string", map[string]any{"page": "reports", "tab": map[string]any{"table": true}, "subtab": "sql"},
			[]string{"current_time", "srv__*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, s.Active(tt.ctx)); diff != "" {
				t.Errorf("Active(%v) (-want +got):\n%s", tt.ctx, diff)
			}
		})
	}

	var nilScopes *Scopes
	if got := nilScopes.Active(map[string]any{"page": "reports"}); got != nil {
		t.Errorf("nil scopes: Active = %v", got)
	}
	noGlobal := &Scopes{Pages: map[string]PageScope{"p": {Tools: []string{"a"}}}}
	if diff := cmp.Diff([]string{"a"}, noGlobal.Active(map[string]any{"page": "p"})); diff != "" {
		t.Errorf("page only (-want +got):\n%s", diff)
	}
	if got := noGlobal.Active(nil); got != nil {
		t.Errorf("nothing active: %v", got)
	}
}

// TestActiveDoesNotAlias: appending to what Active returned must not write into the configuration.
func TestActiveDoesNotAlias(t *testing.T) {
	global := make([]string, 1, 4)
	global[0] = "current_time"
	s := &Scopes{Global: global}
	got := append(s.Active(nil), "srv__a")
	if cap(global) == 4 && global[:2][1] == "srv__a" {
		t.Errorf("appending to Active's result wrote into Scopes.Global: %v", got)
	}
}

func TestBound(t *testing.T) {
	s := testScopes()
	s.Pages["reports"].Tabs["table"].Subtabs["sql"] = SubtabScope{Tools: []string{"sql_run", "current_time"}}
	tests := []struct {
		name string
		want bool
	}{
		{"current_time", false}, // global, though a subtab names it too
		{"srv__a", true},        // a page's pattern
		{"table_edit", true},    // a tab's
		{"sql_run", true},       // a subtab's
		{"settings_sql", true},
		{"other__x", false}, // in no scope
		{"srv_a", false},
	}
	for _, tt := range tests {
		if got := s.Bound(tt.name); got != tt.want {
			t.Errorf("Bound(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	var nilScopes *Scopes
	if nilScopes.Bound("srv__a") {
		t.Error("nil scopes bind srv__a")
	}
	everything := &Scopes{Global: []string{"*"}, Pages: map[string]PageScope{"p": {Tools: []string{"srv__a"}}}}
	if everything.Bound("srv__a") {
		t.Error(`a global "*" leaves srv__a bound`)
	}
}
