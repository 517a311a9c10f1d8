package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// defaultTimeout bounds a call when neither the tool nor Options set one.
const defaultTimeout = 30 * time.Second

// objectSchema is the schema of a tool that declares none.
var objectSchema = json.RawMessage(`{"type":"object"}`)

// Options configures a Registry. The zero value is ready to use.
type Options struct {
	DefaultTimeout time.Duration // per call, unless the tool sets its own; 0 means 30s
	Logger         *slog.Logger  // nil discards
	// MaxResultBytes bounds a result's text and its payload, each, as stored (default 1 MiB): longer
	// text is cut with a note, a longer payload dropped. MaxAttachmentBytes bounds its attachments
	// together (default 8 MiB): those past it are dropped, with a note. What the model is sent is cut
	// further by the context builder.
	MaxResultBytes     int
	MaxAttachmentBytes int
}

// Defaults of Options' result limits.
const (
	DefaultMaxResultBytes     = 1 << 20
	DefaultMaxAttachmentBytes = 8 << 20
)

// maxErrorBytes bounds the message of a failed call: an error is a sentence for the model, never an
// echo of whatever the call sent.
const maxErrorBytes = 4 << 10

// Registry holds the tools the model may call and runs their calls.
// It is safe for concurrent use.
type Registry struct {
	timeout        time.Duration
	log            *slog.Logger
	maxResult      int
	maxAttachments int

	mu     sync.RWMutex
	tools  map[string]*entry
	closed bool

	// running tracks every tool goroutine, including those a call stopped
	// waiting for after a timeout or cancel, so Close can wait for them.
	running sync.WaitGroup
}

// entry is a registered tool with its info as read at Register.
type entry struct {
	tool   Tool
	info   Info
	schema *jsonschema.Schema
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) *Registry {
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = defaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = DefaultMaxResultBytes
	}
	if opts.MaxAttachmentBytes <= 0 {
		opts.MaxAttachmentBytes = DefaultMaxAttachmentBytes
	}
	return &Registry{
		timeout:        opts.DefaultTimeout,
		log:            opts.Logger,
		maxResult:      opts.MaxResultBytes,
		maxAttachments: opts.MaxAttachmentBytes,
		tools:          make(map[string]*entry),
	}
}

// DefaultTimeout is how long a call of a tool that sets no timeout of its own may run.
func (r *Registry) DefaultTimeout() time.Duration { return r.timeout }

// Register adds t under its Info().Name. It fails when the name is not
// valid, already taken, or the input schema does not compile.
func (r *Registry) Register(t Tool) error {
	e, err := newEntry(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[e.info.Name]; ok {
		return fmt.Errorf("tool: register %s: a tool with this name is already registered", e.info.Name)
	}
	r.tools[e.info.Name] = e
	r.log.Debug("tool registered", "tool", e.info.Name, "source", e.info.Source)
	return nil
}

// newEntry reads t's info once and compiles its input schema.
func newEntry(t Tool) (*entry, error) {
	if t == nil {
		return nil, errors.New("tool: register: nil tool")
	}
	info := t.Info()
	if err := checkName(info.Name); err != nil {
		return nil, fmt.Errorf("tool: register: %w", err)
	}
	if len(bytes.TrimSpace(info.InputSchema)) == 0 {
		info.InputSchema = objectSchema
	}
	if info.Source == "" {
		info.Source = "builtin"
	}
	schema, err := compileSchema(info.Name, info.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool: register %s: %w", info.Name, err)
	}
	return &entry{tool: t, info: info, schema: schema}, nil
}

// Replace makes tools the whole set of tools from source (an MCP server's "mcp:<name>"): tools of
// source not in the list are removed, the others added or updated, in one step, so a model never sees a
// half-updated list. A tool that cannot be registered — a bad name, a schema that does not compile, a
// name another source holds — is left out, and the error names each; the others are registered.
func (r *Registry) Replace(source string, tools []Tool) error {
	var errs []error
	fresh := make(map[string]*entry, len(tools))
	for _, t := range tools {
		e, err := newEntry(t)
		if err == nil && e.info.Source != source {
			err = fmt.Errorf("tool: replace %s: the tool says its source is %q", e.info.Name, e.info.Source)
		}
		if err == nil && fresh[e.info.Name] != nil {
			err = fmt.Errorf("tool: replace %s: two tools of %s have this name", e.info.Name, source)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fresh[e.info.Name] = e
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.tools {
		if e.info.Source == source {
			delete(r.tools, name)
		}
	}
	for name, e := range fresh {
		if old, ok := r.tools[name]; ok {
			errs = append(errs, fmt.Errorf("tool: replace %s: the name is taken by a tool of %s", name, old.info.Source))
			continue
		}
		r.tools[name] = e
	}
	return errors.Join(errs...)
}

// Info reports the registered tool called name.
func (r *Registry) Info(name string) (Info, bool) {
	e, ok := r.lookup(name)
	if !ok {
		return Info{}, false
	}
	return e.info, true
}

// List reports every registered tool, sorted by name.
func (r *Registry) List() []Info {
	r.mu.RLock()
	infos := make([]Info, 0, len(r.tools))
	for _, e := range r.tools {
		infos = append(infos, e.info)
	}
	r.mu.RUnlock()
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return infos
}

// Close makes later calls fail and waits for every tool goroutine still
// running, including those abandoned after a timeout or cancel. A tool that
// ignores its context keeps Close waiting.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.running.Wait()
}

func (r *Registry) lookup(name string) (*entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	return e, ok
}

// names lists the registered tool names, sorted, for error messages.
func (r *Registry) names() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.tools))
	for name := range r.tools {
		names = append(names, name)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
}

// checkName enforces ^[A-Za-z0-9_-]{1,64}$, the rule every provider accepts.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("tool name %q must be 1 to 64 characters long", name)
	}
	for _, c := range []byte(name) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("tool name %q may only hold letters, digits, '_' and '-'", name)
		}
	}
	return nil
}

// compileSchema compiles a tool's input schema. Schemas come from untrusted
// MCP servers, so the compiler may read nothing but the schema itself: every
// $ref or $schema outside it (file://, http://, …) is refused.
func compileSchema(name string, schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("parse input schema: %w", err)
	}
	url := "mem:///tools/" + name + ".json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("add input schema: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile input schema: %w", err)
	}
	return sch, nil
}

// refuseLoader is the compiler's only way to fetch a URL, and it never does.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s is not allowed: a tool schema must be self-contained", url)
}
