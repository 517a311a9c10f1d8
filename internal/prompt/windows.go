package prompt

import (
	"strings"
)

// DefaultWindow is the context window assumed for a model of no known family. A window set too large
// is caught by the provider's "context too long" error, which compacts and retries once.
const DefaultWindow = 128_000

// families are the context windows of known model families in tokens (the most prompt tokens a
// request may hold), matched by the longest prefix of the model's name.
var families = []struct {
	prefix string
	window int
}{
	{"gpt-5", 272_000}, // 400k in all, of which 128k output
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4", 8_192},
	{"gpt-3.5-turbo", 16_385},
	{"chatgpt-4o", 128_000},
	{"o1-mini", 128_000},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4", 200_000},
	{"claude", 200_000},
	{"gemini-1.5-pro", 2_097_152},
	{"gemini-1.0", 30_720},
	{"gemini-pro", 30_720},
	{"gemini", 1_048_576},
	{"gemma3", 128_000},
	{"gemma", 8_192},
	{"llama3.1", 128_000},
	{"llama3.2", 128_000},
	{"llama3.3", 128_000},
	{"llama-3.1", 128_000},
	{"llama-3.3", 128_000},
	{"llama3", 8_192},
	{"qwen3", 40_960},
	{"qwen2.5", 32_768},
	{"mistral-large", 128_000},
	{"mistral", 32_768},
	{"deepseek", 128_000},
}

// Windows resolves the context window of a model: the configured ones first, by "provider/model",
// then by model name, then by pattern ("provider/prefix*" or "prefix*", the longest first); then the
// known families; then DefaultWindow.
type Windows map[string]int

// Lookup returns the context window of model of provider, the provider's configured name.
func (w Windows) Lookup(provider, model string) int {
	full := provider + "/" + model
	if n := w[full]; n > 0 {
		return n
	}
	if n := w[model]; n > 0 {
		return n
	}
	best, bestLen, bestKey := 0, -1, ""
	for k, n := range w {
		p, ok := strings.CutSuffix(k, "*")
		if !ok || n <= 0 || len(p) < bestLen || len(p) == bestLen && k > bestKey {
			continue // the longest pattern wins; of two as long, the first in order
		}
		if strings.HasPrefix(full, p) || strings.HasPrefix(model, p) {
			best, bestLen, bestKey = n, len(p), k
		}
	}
	if bestLen >= 0 {
		return best
	}
	return Family(model)
}

// Family returns the context window of a model by its family, or DefaultWindow.
func Family(model string) int {
	name := strings.ToLower(model)
	name = strings.TrimPrefix(name, "models/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 { // "meta-llama/llama-3.3-70b"
		name = name[i+1:]
	}
	best, bestLen := DefaultWindow, 0
	for _, f := range families {
		if len(f.prefix) > bestLen && strings.HasPrefix(name, f.prefix) {
			best, bestLen = f.window, len(f.prefix)
		}
	}
	return best
}
