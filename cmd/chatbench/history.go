package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// buildHistory makes the continuing sessions the history runs send to: for each size h, sessions of h
// records each. chatd makes the sessions (so they are what chatd makes, owned by its local user, of its
// default agent); the records go straight into its SQLite file while it is stopped, since 200,000 of
// them through the API would take longer than the benchmark. They alternate a user question and an
// assistant answer, as a conversation of h/2 turns without tools.
func (b *bench) buildHistory(ctx context.Context) error {
	c, url, err := b.startChatd(ctx, "http://127.0.0.1:9/v1") // no chat is sent: the upstream is never called
	if err != nil {
		return err
	}
	b.history = map[int][]string{}
	for _, h := range b.opt.history {
		for i := range b.historySessions(h) {
			id, err := createSession(ctx, url, fmt.Sprintf("chatbench h=%d #%d", h, i))
			if err != nil {
				b.procs.stop(c, 10*time.Second)
				return fmt.Errorf("make the sessions of %d records: %w", h, err)
			}
			b.history[h] = append(b.history[h], id)
		}
	}
	b.procs.stop(c, 10*time.Second)
	return b.insertRecords(ctx)
}

// historySessions is how many sessions of h records to make: one per client at the largest c, but no
// more than -history-rows records in all for h.
func (b *bench) historySessions(h int) int {
	return max(1, min(slicesMax(b.opt.conc), b.opt.historyRows/max(h, 1)))
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func createSession(ctx context.Context, base, title string) (string, error) {
	body, _ := json.Marshal(map[string]string{"title": title})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sessions", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST /v1/sessions: %s: %s", resp.Status, b)
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.ID == "" {
		return "", fmt.Errorf("POST /v1/sessions answered %s", b)
	}
	return s.ID, nil
}

// insertRecords writes the records of every history session, one transaction per size. It matches
// internal/store/sqlite/migrations: a record's seq runs 1…h in its session, and the session's last_seq
// is the newest record's seq.
func (b *bench) insertRecords(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+b.db+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, h := range b.opt.history {
		t0 := time.Now()
		if err := insertSessions(ctx, db, b.history[h], h); err != nil {
			return fmt.Errorf("insert the records of %d sessions of %d records: %w", len(b.history[h]), h, err)
		}
		b.logf("history: %d sessions of %d records made in %.1fs", len(b.history[h]), h, time.Since(t0).Seconds())
	}
	// chatd then starts on a checkpointed file with a short WAL, as a long-running one would have.
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

func insertSessions(ctx context.Context, db *sql.DB, sessions []string, h int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO records (id, session_id, user_id, seq, role, content, model,
finish_reason, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`)
	if err != nil {
		return err
	}
	defer ins.Close()
	start := time.Now().Add(-time.Duration(h) * time.Minute) // a conversation that went on for a while
	for _, s := range sessions {
		var user string
		if err := tx.QueryRowContext(ctx, `SELECT user_id FROM sessions WHERE id = $1`, s).Scan(&user); err != nil {
			return fmt.Errorf("session %s: %w", s, err)
		}
		for seq := 1; seq <= h; seq++ {
			role, content, model, finish := "user", fmt.Sprintf("Question %d of this conversation: what comes next?", seq/2+1), "", ""
			if seq%2 == 0 {
				role, model, finish = "assistant", "openai/m", "stop"
				content = fmt.Sprintf("Answer %d: here is what comes next, in a few words that stand for an answer of a sentence or two.", seq/2)
			}
			at := start.Add(time.Duration(seq) * time.Minute / 2).UnixMicro()
			if _, err := ins.ExecContext(ctx, uuid.Must(uuid.NewV7()).String(), s, user, seq, role, content, model, finish, at); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET last_seq = $1, updated_at = $2 WHERE id = $3`,
			h, time.Now().UnixMicro(), s); err != nil {
			return err
		}
	}
	return tx.Commit()
}
