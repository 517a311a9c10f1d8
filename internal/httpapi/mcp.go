package httpapi

import (
	"net/http"

	"chatd/internal/mcpclient"
)

// listMCPServers answers GET /v1/mcp/servers: each configured server's state, tool count and last
// error (with secrets redacted).
func (s *server) listMCPServers(w http.ResponseWriter, r *http.Request) error {
	out := []mcpclient.Status{}
	if s.MCP != nil {
		out = append(out, s.MCP.Servers()...)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}
