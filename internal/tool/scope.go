package tool

// Scopes are the tools bound to where the user is in an application (seed 003): global tools, then
// the tools of the request context's page, of its tab within that page, and of its subtab within that
// tab. Each list holds tool names and "server__*" patterns.
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
