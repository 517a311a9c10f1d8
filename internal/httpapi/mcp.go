package httpapi

import "net/http"

// listMCPServers answers GET /v1/mcp/servers: each configured server's state, tool count and last
// error (with secrets redacted).
func (s *server) listMCPServers(w http.ResponseWriter, r *http.Request) error {
	out := []MCPServer{}
	if s.MCPServers != nil {
		out = append(out, s.MCPServers()...)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}
