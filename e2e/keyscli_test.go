package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKeysAndUsageCommands: chatd keys create prints the key alone on stdout and its id on stderr; keys
// list shows the keys without their secrets; keys revoke marks one revoked; usage prints its table; and
// while chatd serves the database, the commands say to use the API instead.
func TestKeysAndUsageCommands(t *testing.T) {
	t.Parallel()
	bin := buildChatd(t)
	path := filepath.Join(t.TempDir(), "chatd.db")
	db := "sqlite:" + path
	run := func(args ...string) (stdout, stderr string, err error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}

	key, info, err := run("keys", "create", "--user", "alice", "--name", "laptop", "--agents", "default,support",
		"--expires", "30d", "--tokens-per-day", "1000", "--db", db)
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, info)
	}
	key = strings.TrimSuffix(key, "\n")
	if !regexp.MustCompile(`^chd_[A-Za-z0-9_-]{43}$`).MatchString(key) {
		t.Fatalf("keys create printed %q on stdout; want the key alone", key)
	}
	id := regexp.MustCompile(`Created key (\S+) for user alice`).FindStringSubmatch(info)
	if id == nil || !strings.Contains(info, "shown once") {
		t.Fatalf("keys create said on stderr: %q", info)
	}
	if _, _, err := run("keys", "create", "--user", "bob", "--admin", "--db", db); err != nil {
		t.Fatal(err)
	}

	list, _, err := run("keys", "list", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, key) || !strings.Contains(list, key[:10]+"…") || !strings.Contains(list, id[1]) ||
		!strings.Contains(list, "default,support") || !strings.Contains(list, "laptop") {
		t.Errorf("keys list:\n%s\nwant alice's key by id, name, agents and prefix, never the secret", list)
	}
	if only, _, _ := run("keys", "list", "--user", "bob", "--db", db); strings.Contains(only, id[1]) {
		t.Errorf("keys list --user bob lists alice's key:\n%s", only)
	}

	if out, errOut, err := run("keys", "revoke", id[1], "--db", db); err != nil || !strings.Contains(out, "Revoked key "+id[1]) {
		t.Errorf("keys revoke: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := run("keys", "revoke", "--db", db, id[1]); err != nil || !strings.Contains(out, "Revoked key "+id[1]) {
		t.Errorf("keys revoke again, its flag first: %v\n%s%s", err, out, errOut)
	}
	if list, _, _ := run("keys", "list", "--user", "alice", "--db", db); !strings.Contains(list, "revoked") {
		t.Errorf("keys list after the revoke:\n%s", list)
	}
	if _, errOut, err := run("keys", "revoke", "--db", db, "no-such-key"); err == nil || !strings.Contains(errOut, "no key") {
		t.Errorf("revoking a missing key: %v %s", err, errOut)
	}

	table, errOut, err := run("usage", "--group-by", "user", "--from", "2026-01-01", "--db", db)
	if err != nil || !regexp.MustCompile(`(?m)^\s*USER\s+CALLS\s+INPUT`).MatchString(table) || !regexp.MustCompile(`(?m)^\s*total\s+0\s`).MatchString(table) {
		t.Errorf("usage: %v\n%s%s", err, table, errOut)
	}
	if _, errOut, err := run("usage", "--group-by", "week", "--db", db); err == nil || !strings.Contains(errOut, "--group-by") {
		t.Errorf("usage --group-by week: %v %s", err, errOut)
	}

	p := startChatd(t, "chatd", bin, path)
	_, errOut, err = run("keys", "create", "--user", "carol", "--db", db)
	if err == nil || !strings.Contains(errOut, "POST/GET/DELETE /v1/keys") {
		t.Errorf("keys create while chatd serves the database: %v\n%s", err, errOut)
	}
	p.terminate(t)
}
