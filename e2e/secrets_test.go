package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/llm/llmtest"
)

// TestSecretsStaySecret: chatd keeps every secret it is given or makes out of its log, its answers and
// its database — two API keys made with the CLI (a user's and an admin's), a key made through the API,
// a web sign-in cookie, a wrong key a caller tried, and the provider's API key. The user runs a whole
// session with the key (a streamed chat with tool calls, a batch chat, the run, its events, its
// diagnostics, the messages, the UI history, the usage), signs in to the web UI with it and out again;
// the admin makes a key, which is used, and revokes it; requests carrying secrets are refused (a wrong
// key, a bad body, the revoked key, the cookie after sign-out, a key in the query string, …); and the
// provider echoes its key in its errors, before the stream and inside it. chatd logs at debug level.
// Then chatd is stopped and each secret is looked for in the log, in every answer (body and headers),
// and in every file of the database, read as bytes. A secret may appear only where it is meant to be:
// a new key in the answer that made it, the cookie in the Set-Cookie of the sign-in.
func TestSecretsStaySecret(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	bin := buildChatd(t)
	dir := t.TempDir() // the database's files, and nothing else
	db := filepath.Join(dir, "chatd.db")
	probe := &secretProbe{t: t}
	adminKey := probe.cliKey(bin, db, "--user", "root", "--admin")
	userKey := probe.cliKey(bin, db, "--user", "alice")

	providerKey := "sk-e2e-secret-" + rand.Text()
	up := llmtest.NewServer(t)
	up.Respond = echoingModel(providerKey)
	up.Strict = true
	up.Requests() // orders the writes above before every request (see newModel)
	p := startChatd(t, "chatd", bin, db, "OPENAI_API_KEY="+providerKey, "OPENAI_BASE_URL="+up.BaseURL(),
		"CHATD_MODEL=openai/llmtest-1", "CHATD_LOG_LEVEL=debug", "CHATD_CONFIG=", "CHATD_MCP_CONFIG=")
	probe.base = p.base

	session := probe.userSession(userKey)
	cookie := probe.webSignIn(userKey, session)
	madeKey := probe.adminKeys(adminKey)
	wrongKey := probe.refusals(userKey, madeKey, cookie)
	probe.providerFailures(userKey, session)

	// A clean exit checkpoints the WAL into chatd.db and removes it with the -shm: read them now too.
	running := databaseFiles(t, dir, "while chatd ran")
	p.terminate(t)
	if code, ok := p.waitExit(patience); !ok || code != 0 {
		t.Fatalf("chatd did not exit cleanly after SIGTERM (exited %v, code %d)", ok, code)
	}
	log := p.out.String()
	if !regexp.MustCompile(`msg="chatd listening" .*auth="API keys \(Authorization: Bearer`).MatchString(log) {
		t.Error(`the "chatd listening" line does not say that callers authenticate with API keys (auth=…)`)
	}
	if !strings.Contains(log, "level=DEBUG") {
		t.Error("chatd logged nothing at debug level: the log searched is not all it can say")
	}
	checkUpstreamKey(t, up, providerKey)

	secrets := []knownSecret{
		{"the user's API key", userKey},
		{"the admin's API key", adminKey},
		{"the API key made through the API", madeKey},
		{"the sign-in cookie", cookie},
		{"the wrong API key a caller tried", wrongKey},
		{"the provider's API key", providerKey},
	}
	places := append(probe.places(), leakPlace{"chatd's log (stdout and stderr)", []byte(log), true})
	dbFiles := append(running, databaseFiles(t, dir, "after chatd exited")...)
	places = append(places, dbFiles...)
	checkHashesStored(t, dbFiles, userKey, adminKey)
	var searched []string
	for _, pl := range places[len(places)-len(dbFiles)-1:] {
		searched = append(searched, fmt.Sprintf("%s (%d bytes)", pl.name, len(pl.data)))
	}
	t.Logf("searched %d answers, what the CLI said, %s", len(probe.answers), strings.Join(searched, ", "))
	for _, s := range secrets {
		for _, pl := range places {
			if where := s.foundIn(pl); where != "" {
				t.Errorf("%s appears in %s", s.name, where)
			}
		}
	}
}

// secretProbe makes chatd's callers' requests and keeps every answer, to search them for secrets.
type secretProbe struct {
	t       *testing.T
	base    string
	answers []*probeAnswer
	cli     []leakPlace // what the keys CLI said besides the key
}

// probeAnswer is one answer of chatd as the test keeps it. Where a secret is meant to be (the new key in
// the answer that made it, the cookie in the sign-in's Set-Cookie) it is replaced by a note before the
// answer is searched, once: a second copy is still found.
type probeAnswer struct {
	what   string // the request, as a failure names it
	status int
	header http.Header
	body   []byte
}

// authBearer and authCookie are the two ways a request carries a caller's secret.
func authBearer(key string) []string   { return []string{"Authorization", "Bearer " + key} }
func authCookie(value string) []string { return []string{"Cookie", "chatd_session=" + value} }

// do sends a request (body "" for none; header as name, value pairs), reads the whole answer, keeps it,
// and fails the test unless its status is want.
func (pr *secretProbe) do(what string, want int, method, path, body string, header ...string) *probeAnswer {
	pr.t.Helper()
	ctx, cancel := context.WithTimeout(pr.t.Context(), patience)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, pr.base+path, rd)
	if err != nil {
		pr.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pr.t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		pr.t.Fatalf("%s: read the answer: %v", what, err)
	}
	a := &probeAnswer{what: what + " (" + method + " " + path + ")", status: resp.StatusCode, header: resp.Header, body: raw}
	pr.answers = append(pr.answers, a)
	if a.status != want {
		pr.t.Fatalf("%s: %d, want %d: %s", a.what, a.status, want, raw)
	}
	return a
}

// refused sends a request that must be refused with status and error code.
func (pr *secretProbe) refused(what string, status int, code, method, path, body string, header ...string) {
	pr.t.Helper()
	a := pr.do(what, status, method, path, body, header...)
	var e struct{ Error struct{ Code string } }
	if json.Unmarshal(a.body, &e) != nil || e.Error.Code != code {
		pr.t.Errorf("%s: error code %q, want %q: %s", a.what, e.Error.Code, code, a.body)
	}
}

// decode reads an answer's JSON body into v.
func (pr *secretProbe) decode(a *probeAnswer, v any) {
	pr.t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		pr.t.Fatalf("%s: %v: %s", a.what, err, a.body)
	}
}

// events reads an answer's SSE body.
func (pr *secretProbe) events(a *probeAnswer) []event {
	pr.t.Helper()
	var out []event
	if err := readEvents(bytes.NewReader(a.body), func(ev event) bool {
		out = append(out, ev)
		return true
	}); err != nil {
		pr.t.Fatalf("%s: %v", a.what, err)
	}
	if len(out) == 0 || out[len(out)-1].Type != "done" {
		pr.t.Fatalf("%s: the stream does not end with done: %s", a.what, eventList(out))
	}
	return out
}

// cliKey makes a key with chatd keys create, which prints exactly the key on stdout.
func (pr *secretProbe) cliKey(bin, db string, args ...string) string {
	pr.t.Helper()
	cmd := exec.CommandContext(pr.t.Context(), bin, append([]string{"keys", "create", "--db", "sqlite:" + db}, args...)...)
	cmd.Env = append(os.Environ(), "CHATD_CONFIG=", "CHATD_DB=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		pr.t.Fatalf("chatd keys create %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	key, ok := strings.CutSuffix(stdout.String(), "\n")
	if !ok || !regexp.MustCompile(`^chd_[A-Za-z0-9_-]{43}$`).MatchString(key) {
		pr.t.Fatalf("chatd keys create %s printed %q on stdout, want exactly a key and a newline", strings.Join(args, " "), stdout.String())
	}
	pr.cli = append(pr.cli, leakPlace{"the stderr of chatd keys create " + strings.Join(args, " "), stderr.Bytes(), true})
	return key
}

// userSession runs a user's session with the key as a bearer token, and returns the session's id.
func (pr *secretProbe) userSession(key string) string {
	t := pr.t
	t.Helper()
	pr.do("who the user key is", 200, "GET", "/v1/auth/session", "", authBearer(key)...)
	streamed := pr.events(pr.do("a streamed chat with tool calls", 200, "POST", "/v1/chat/stream",
		`{"message":"What time is it in Paris and in Tokyo?"}`, append(authBearer(key), "Accept", "text/event-stream")...))
	session, _ := streamed[0].Data["session_id"].(string)
	run, _ := streamed[0].Data["run_id"].(string)
	calls := 0
	for _, ev := range streamed {
		if ev.Type == "tool_complete" && ev.Data["name"] == "current_time" && ev.Data["success"] == true {
			calls++
		}
	}
	if done := streamed[len(streamed)-1]; session == "" || run == "" || calls != 2 || done.Data["status"] != "completed" {
		t.Fatalf("the streamed chat (session %q, run %q) made %d current_time calls and ended %v, want 2 and completed:\n%s",
			session, run, calls, done.Data["status"], eventList(streamed))
	}

	var batch struct{ Status string }
	pr.decode(pr.do("a batch chat", 200, "POST", "/v1/chat",
		`{"message":"And what time is it there now? (batch)","session_id":"`+session+`"}`, authBearer(key)...), &batch)
	if batch.Status != "completed" {
		t.Fatalf("the batch chat ended %q, want completed", batch.Status)
	}

	pr.do("the run", 200, "GET", "/v1/runs/"+run, "", authBearer(key)...)
	pr.events(pr.do("the run's events, replayed", 200, "GET", "/v1/runs/"+run+"/events", "", authBearer(key)...))
	pr.do("the run's diagnostics", 200, "GET", "/v1/runs/"+run+"/diagnostics", "", authBearer(key)...)
	pr.do("the session", 200, "GET", "/v1/sessions/"+session, "", authBearer(key)...)
	pr.do("the sessions", 200, "GET", "/v1/sessions", "", authBearer(key)...)
	pr.do("the session's messages", 200, "GET", "/v1/sessions/"+session+"/messages", "", authBearer(key)...)
	pr.do("the UI history", 200, "GET", "/v1/ui/chat/"+session, "", authBearer(key)...)
	pr.do("the user's usage", 200, "GET", "/v1/usage", "", authBearer(key)...)
	pr.do("the models", 200, "GET", "/v1/models", "", authBearer(key)...)
	pr.do("the tools", 200, "GET", "/v1/tools", "", authBearer(key)...)
	return session
}

// webSignIn signs in with the key, uses the cookie, signs out, and returns the cookie's value.
func (pr *secretProbe) webSignIn(key, session string) string {
	t := pr.t
	t.Helper()
	in := pr.do("the web sign-in", 200, "POST", "/v1/auth/session", `{"key":"`+key+`"}`)
	var value string
	for _, c := range (&http.Response{Header: in.header}).Cookies() {
		if c.Name == "chatd_session" {
			value = c.Value
		}
	}
	if !regexp.MustCompile(`^chs_[A-Za-z0-9_-]{43}$`).MatchString(value) {
		t.Fatalf("the sign-in set the cookie %q, want chs_ and 43 characters: %v", value, in.header)
	}
	if !exemptHeader(in.header["Set-Cookie"], "chatd_session="+value, "chatd_session=(the sign-in's cookie, meant to be here)") {
		t.Fatalf("the sign-in's Set-Cookie does not hold the cookie: %v", in.header["Set-Cookie"])
	}

	var who struct{ User, Method string }
	pr.decode(pr.do("who the cookie is", 200, "GET", "/v1/auth/session", "", authCookie(value)...), &who)
	if who.User != "alice" || who.Method != "cookie" {
		t.Fatalf("the cookie signs in %+v, want alice by cookie", who)
	}
	pr.do("the session's messages, by cookie", 200, "GET", "/v1/sessions/"+session+"/messages", "", authCookie(value)...)
	pr.do("the sign-out", 204, "DELETE", "/v1/auth/session", "", authCookie(value)...)
	return value
}

// adminKeys makes a key through the API with the admin's key, uses it, revokes it, and returns it.
func (pr *secretProbe) adminKeys(admin string) string {
	t := pr.t
	t.Helper()
	made := pr.do("a key made by the admin", 201, "POST", "/v1/keys", `{"user":"carol","name":"made through the API"}`, authBearer(admin)...)
	var k struct{ ID, Key string }
	pr.decode(made, &k)
	if !regexp.MustCompile(`^chd_[A-Za-z0-9_-]{43}$`).MatchString(k.Key) || k.ID == "" {
		t.Fatalf("POST /v1/keys answered key %q, id %q", k.Key, k.ID)
	}
	if made.header.Get("Cache-Control") != "no-store" {
		t.Errorf("the answer holding a new key has Cache-Control %q, want no-store", made.header.Get("Cache-Control"))
	}
	if !exemptBody(made, `"key":"`+k.Key+`"`, `"key":"(the new key, meant to be here)"`) {
		t.Fatalf("POST /v1/keys: the key is not in its answer's \"key\": %s", made.body)
	}

	var who struct{ User string }
	pr.decode(pr.do("who the made key is", 200, "GET", "/v1/auth/session", "", authBearer(k.Key)...), &who)
	if who.User != "carol" {
		t.Fatalf("the key made through the API signs in %q, want carol", who.User)
	}
	pr.do("the keys", 200, "GET", "/v1/keys", "", authBearer(admin)...)
	pr.do("one user's keys", 200, "GET", "/v1/keys?user=carol", "", authBearer(admin)...)
	pr.do("every user's usage", 200, "GET", "/v1/usage?group_by=key", "", authBearer(admin)...)
	pr.do("the made key's revocation", 200, "DELETE", "/v1/keys/"+k.ID, "", authBearer(admin)...)
	return k.Key
}

// refusals makes requests that carry secrets and are refused, and returns the wrong key it tried.
func (pr *secretProbe) refusals(userKey, revoked, signedOut string) string {
	pr.t.Helper()
	var b [32]byte
	rand.Read(b[:])
	wrong := "chd_" + base64.RawURLEncoding.EncodeToString(b[:])
	pr.refused("a wrong key of the right shape", 401, "invalid_key", "GET", "/v1/sessions", "", authBearer(wrong)...)
	pr.refused("a sign-in with a wrong key", 401, "invalid_key", "POST", "/v1/auth/session", `{"key":"`+wrong+`"}`)
	pr.refused("the user key with a bad body holding it", 400, "invalid_json", "POST", "/v1/chat",
		`{"message":"hello","api_key":"`+userKey+`",`, authBearer(userKey)...)
	pr.refused("the user key with a body of the wrong type", 400, "invalid_json", "POST", "/v1/chat",
		`{"message":["`+userKey+`"]}`, authBearer(userKey)...)
	pr.refused("the revoked key", 401, "key_revoked", "GET", "/v1/sessions", "", authBearer(revoked)...)
	pr.refused("a sign-in with the revoked key", 401, "key_revoked", "POST", "/v1/auth/session", `{"key":"`+revoked+`"}`)
	pr.refused("the cookie after sign-out", 401, "invalid_session", "GET", "/v1/sessions", "", authCookie(signedOut)...)
	pr.refused("a key in the query string", 401, "auth_required", "GET", "/v1/usage?key="+userKey, "")
	pr.refused("a key as HTTP Basic credentials", 401, "invalid_authorization", "GET", "/v1/sessions", "",
		"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:"+userKey)))
	pr.refused("a key as the sign-in cookie", 401, "invalid_session", "GET", "/v1/sessions", "", authCookie(userKey)...)
	pr.refused("the user key on an admin's route", 403, "admin_required", "POST", "/v1/keys", `{"user":"mallory"}`, authBearer(userKey)...)
	return wrong
}

// The messages that make echoingModel fail with its key in the error.
const (
	refusesWithKey    = "Refuse this one (status error with the key)"
	failsMidStreamKey = "Fail this one (in-band error with the key)"
)

// echoingModel is respond, but for the two messages above: to one it answers 401 with an error body
// that names the key in full, as some OpenAI-compatible servers do; to the other it streams some text,
// then an in-band error naming the key.
func echoingModel(key string) func(int, llmtest.Request) llmtest.Turn {
	return func(n int, req llmtest.Request) llmtest.Turn {
		// A failed run leaves its user message unanswered, and chatd sends it merged with the next one.
		msg := lastUserText(req.Messages())
		switch {
		case strings.HasSuffix(msg, refusesWithKey):
			return llmtest.Turn{Status: http.StatusUnauthorized, ErrorMessage: "Incorrect API key provided: " + key + "."}
		case strings.HasSuffix(msg, failsMidStreamKey):
			return llmtest.Turn{Text: "Let me see.", InBandError: "the proxy's upstream refused the key " + key}
		}
		return respond(n, req)
	}
}

// providerFailures sends the messages echoingModel fails with its key, and reads the failed runs.
func (pr *secretProbe) providerFailures(key, session string) {
	t := pr.t
	t.Helper()
	var refused struct {
		RunID string `json:"run_id"`
		Error struct{ Code string }
	}
	pr.decode(pr.do("a batch chat the provider refuses", 502, "POST", "/v1/chat",
		`{"message":"`+refusesWithKey+`","session_id":"`+session+`"}`, authBearer(key)...), &refused)
	if refused.Error.Code != "upstream_auth" {
		t.Errorf("the refused chat's error code is %q, want upstream_auth", refused.Error.Code)
	}
	streamed := pr.events(pr.do("a streamed chat the provider fails", 200, "POST", "/v1/chat/stream",
		`{"message":"`+failsMidStreamKey+`","session_id":"`+session+`"}`, append(authBearer(key), "Accept", "text/event-stream")...))
	run, _ := streamed[0].Data["run_id"].(string)
	if done := streamed[len(streamed)-1]; done.Data["status"] != "failed" {
		t.Errorf("the chat failed mid-stream ended %v, want failed:\n%s", done.Data["status"], eventList(streamed))
	}
	for _, id := range []string{refused.RunID, run} {
		pr.do("a failed run", 200, "GET", "/v1/runs/"+id, "", authBearer(key)...)
		pr.events(pr.do("a failed run's events, replayed", 200, "GET", "/v1/runs/"+id+"/events", "", authBearer(key)...))
	}
	pr.do("the UI history with the failed runs", 200, "GET", "/v1/ui/chat/"+session, "", authBearer(key)...)
}

// exemptHeader replaces s with note in the first of vals that holds it, and reports whether one did.
func exemptHeader(vals []string, s, note string) bool {
	for i, v := range vals {
		if strings.Contains(v, s) {
			vals[i] = strings.Replace(v, s, note, 1)
			return true
		}
	}
	return false
}

// exemptBody replaces the first s in a's body with note, and reports whether there was one.
func exemptBody(a *probeAnswer, s, note string) bool {
	if !bytes.Contains(a.body, []byte(s)) {
		return false
	}
	a.body = bytes.Replace(a.body, []byte(s), []byte(note), 1)
	return true
}

// checkUpstreamKey checks that the provider's key did reach the provider: the search for it elsewhere
// looks for a key chatd really used.
func checkUpstreamKey(t *testing.T, up *llmtest.Server, key string) {
	t.Helper()
	reqs := up.Requests()
	if len(reqs) == 0 {
		t.Fatal("chatd sent no request to the model")
	}
	for i, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer "+key {
			t.Errorf("model request %d did not carry the provider's key as its bearer token", i+1)
		}
	}
}

// leakPlace is something searched for secrets. A hash of a secret may be in the database (the keys'
// and sign-ins' are), not elsewhere.
type leakPlace struct {
	name     string
	data     []byte
	noHashes bool // the secrets' hashes must not be here either
}

// places returns the answers and what the CLI said, as places to search.
func (pr *secretProbe) places() []leakPlace {
	out := append([]leakPlace(nil), pr.cli...)
	for _, a := range pr.answers {
		var h bytes.Buffer
		a.header.Write(&h)
		out = append(out,
			leakPlace{"the headers of the answer to " + a.what, h.Bytes(), true},
			leakPlace{"the body of the answer to " + a.what, a.body, true})
	}
	return out
}

// databaseFiles reads every file in dir, the database's directory: chatd.db, its -wal and -shm, and its
// lock file; when says at what moment, for a failure to name.
func databaseFiles(t *testing.T, dir, when string) []leakPlace {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []leakPlace
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, leakPlace{"the database file " + e.Name() + ", " + when, raw, false})
	}
	if len(entries) == 0 || entries[0].Name() != "chatd.db" {
		t.Fatalf("the database's directory holds %v %s, want chatd.db first", entries, when)
	}
	return out
}

// checkHashesStored checks that the database's files hold the keys' hashes: the search reads what chatd
// stored.
func checkHashesStored(t *testing.T, files []leakPlace, keys ...string) {
	t.Helper()
	var all []byte
	for _, f := range files {
		all = append(all, f.data...)
	}
	for _, k := range keys {
		if h := sha256.Sum256([]byte(k)); !bytes.Contains(all, h[:]) {
			t.Errorf("the database's files do not hold the hash of the key %.10s…: the search for secrets in them is not reading what chatd stored", k)
		}
	}
}

// knownSecret is a secret the test knows, looked for as itself, base64-encoded, and (where no hash may
// be) as its SHA-256, in hex and as bytes.
type knownSecret struct {
	name, value string
}

// foundIn returns where in pl the secret appears, or "".
func (s knownSecret) foundIn(pl leakPlace) string {
	h := sha256.Sum256([]byte(s.value))
	forms := []struct{ name, value string }{
		{"as itself", s.value},
		{"base64-encoded", base64.RawStdEncoding.EncodeToString([]byte(s.value))},
	}
	if pl.noHashes {
		forms = append(forms,
			struct{ name, value string }{"as its SHA-256 in hex", hex.EncodeToString(h[:])},
			struct{ name, value string }{"as its SHA-256", string(h[:])})
	}
	for _, f := range forms {
		if i := bytes.Index(pl.data, []byte(f.value)); i >= 0 {
			return fmt.Sprintf("%s, %s, at byte %d: %s", pl.name, f.name, i, quoteAround(pl.data, i, len(f.value), "<"+s.name+">"))
		}
	}
	return ""
}

// quoteAround quotes what surrounds data[i:i+n], that span shown as mark.
func quoteAround(data []byte, i, n int, mark string) string {
	from, to := max(i-80, 0), min(i+n+80, len(data))
	return strconv.Quote(string(data[from:i]) + mark + string(data[i+n:to]))
}
