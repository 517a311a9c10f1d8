package mcpclient

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall measures one call of a trivial tool through the manager and the registry ("chatd"),
// against the same call on a bare SDK session of its own ("sdk"): the difference is what chatd adds —
// argument validation, the registry's goroutine and timeout, the progress token, the result's
// conversion.
func BenchmarkCall(b *testing.B) {
	b.Run("http", func(b *testing.B) {
		srv := httpServer(b, newTestServer(nil), nil)
		benchCall(b, httpConfig("srv", srv.URL, ""), func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: srv.URL}
		})
	})
	b.Run("stdio", func(b *testing.B) {
		benchCall(b, stdioConfig("srv", "1", ""), func() mcp.Transport {
			cmd := exec.Command(os.Args[0])
			cmd.Env = []string{serverEnv + "=1"}
			return &mcp.CommandTransport{Command: cmd}
		})
	})
}

func benchCall(b *testing.B, config string, direct func() mcp.Transport) {
	args := json.RawMessage(`{"text":"hi"}`)
	b.Run("chatd", func(b *testing.B) {
		_, reg := startManager(b, config, nil, testOptions())
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if out := reg.Call(ctx, "srv__echo", args); !out.Success || out.Content != "hi" {
				b.Fatalf("%+v", out)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		ctx := context.Background()
		sess, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, direct(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		b.ReportAllocs()
		for b.Loop() {
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
			if err != nil || res.IsError {
				b.Fatal(res, err)
			}
		}
	})
}
