package tool

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Scopes are the tools bound to where the user is in an application: global tools, then
// the tools of the request context's page, of its tab within that page, and of its subtab within that
// tab. Each list holds patterns (see Match).
//
// A tool that a page, tab or subtab names, and no global pattern does, is bound to its scopes: an agent
// without an allow-list offers it only where one of them is active (Bound). The patterns in force for a
// request (Active) add their tools to whatever the agent allows.
type Scopes struct {
	Global []string             `yaml:"global" json:"global,omitempty"`
	Pages  map[string]PageScope `yaml:"pages" json:"pages,omitempty"`
}

// PageScope is one page's tools and its tabs.
type PageScope struct {
	Tools []string            `yaml:"tools" json:"tools,omitempty"`
	Tabs  map[string]TabScope `yaml:"tabs" json:"tabs,omitempty"`
}

// TabScope is one tab's tools and its subtabs.
type TabScope struct {
	Tools   []string               `yaml:"tools" json:"tools,omitempty"`
	Subtabs map[string]SubtabScope `yaml:"subtabs" json:"subtabs,omitempty"`
}

// SubtabScope is one subtab's tools.
type SubtabScope struct {
	Tools []string `yaml:"tools" json:"tools,omitempty"`
}

// Match reports whether pattern names the tool called name. A pattern is a tool name, naming that
// tool, or a prefix followed by "*", naming every tool whose name starts with the prefix:
// "everything__*" is every tool of the MCP server "everything", and "*" alone is every tool. Any other
// use of "*" is invalid (CheckPattern); an invalid or empty pattern names no tool.
func Match(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return !strings.Contains(prefix, "*") && strings.HasPrefix(name, prefix)
	}
	return pattern != "" && pattern == name && !strings.Contains(pattern, "*")
}

// MatchAny reports whether any of patterns names the tool called name.
func MatchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// CheckPattern reports why pattern is not a valid pattern: it is empty, or holds a "*" that is not its
// last character.
func CheckPattern(pattern string) error {
	if pattern == "" {
		return errors.New(`a tool pattern is empty; use a tool name, or a prefix followed by "*" such as "everything__*"`)
	}
	if i := strings.IndexByte(pattern, '*'); i >= 0 && i != len(pattern)-1 {
		return fmt.Errorf(`tool pattern %q is invalid: "*" may only end a pattern, as in "everything__*"`, pattern)
	}
	return nil
}

// Check reports the first invalid pattern of s, saying where it is. A nil s is valid.
func (s *Scopes) Check() error {
	if s == nil {
		return nil
	}
	if err := checkPatterns("global", s.Global); err != nil {
		return err
	}
	// In key order, so that the same file always gets the same message.
	for _, pn := range slices.Sorted(maps.Keys(s.Pages)) {
		p := s.Pages[pn]
		if err := checkPatterns("pages."+pn, p.Tools); err != nil {
			return err
		}
		for _, tn := range slices.Sorted(maps.Keys(p.Tabs)) {
			t := p.Tabs[tn]
			if err := checkPatterns("pages."+pn+".tabs."+tn, t.Tools); err != nil {
				return err
			}
			for _, sn := range slices.Sorted(maps.Keys(t.Subtabs)) {
				if err := checkPatterns("pages."+pn+".tabs."+tn+".subtabs."+sn, t.Subtabs[sn].Tools); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func checkPatterns(where string, patterns []string) error {
	for _, p := range patterns {
		if err := CheckPattern(p); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// Active returns the patterns in force for a request context: the global ones, those of the page
// ctx["page"], of the tab ctx["tab"] of that page, and of the subtab ctx["subtab"] of that tab. A key
// whose value is not a string is ignored, as is a tab without its page or a subtab without its tab.
// The result may share memory with s: callers must not modify it. A nil s has no patterns.
func (s *Scopes) Active(ctx map[string]any) []string {
	if s == nil {
		return nil
	}
	lists := [4][]string{s.Global}
	if page, ok := s.Pages[str(ctx, "page")]; ok {
		lists[1] = page.Tools
		if tab, ok := page.Tabs[str(ctx, "tab")]; ok {
			lists[2] = tab.Tools
			if sub, ok := tab.Subtabs[str(ctx, "subtab")]; ok {
				lists[3] = sub.Tools
			}
		}
	}
	n, last := 0, -1
	for i, l := range lists {
		if len(l) > 0 {
			n += len(l)
			last = i
		}
	}
	switch {
	case n == 0:
		return nil
	case n == len(lists[last]): // one list: no copy
		return slices.Clip(lists[last])
	}
	out := make([]string, 0, n)
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// str is ctx[key] when it is a string; "" otherwise.
func str(ctx map[string]any, key string) string {
	v, _ := ctx[key].(string)
	return v
}

// Bound reports whether the tool called name is bound to a scope: a pattern of some page, tab or
// subtab names it, and no global pattern does. A bound tool is offered only where its scope is active
// (besides agents that list it themselves). A nil s binds nothing.
func (s *Scopes) Bound(name string) bool {
	if s == nil || MatchAny(s.Global, name) {
		return false
	}
	for _, p := range s.Pages {
		if MatchAny(p.Tools, name) {
			return true
		}
		for _, t := range p.Tabs {
			if MatchAny(t.Tools, name) {
				return true
			}
			for _, st := range t.Subtabs {
				if MatchAny(st.Tools, name) {
					return true
				}
			}
		}
	}
	return false
}
