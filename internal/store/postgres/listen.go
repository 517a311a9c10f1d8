package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"chatd/internal/store"
)

// Listener receives the notifications chatd instances wake each other with (LISTEN on this database and
// schema's channels) on a connection of its own, and hands each to a function as a store.Wakeup. When
// its connection fails it connects again, and then hands on a store.WakeAll: what was sent meanwhile
// is lost, and the readers look at the store again. Notifications only wake; the store stays the
// source of truth, and chatd polls it when none come.
type Listener struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	connected bool
}

// Listen starts a listener of this store's channels on its own connection to dsn: the store's DSN, or
// one that bypasses a pooler in transaction mode, which breaks LISTEN. fn is called on the listener's
// goroutine, one notification at a time: it must not block. Close stops it.
func (db *DB) Listen(dsn string, fn func(store.Wakeup), log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{cancel: cancel}
	l.wg.Go(func() { l.run(ctx, dsn, db.channel, fn, log) })
	return l
}

// Connected reports whether the listener is listening now.
func (l *Listener) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

func (l *Listener) setConnected(c bool) {
	l.mu.Lock()
	l.connected = c
	l.mu.Unlock()
}

// Close stops listening and waits for the listener's goroutine.
func (l *Listener) Close() {
	l.cancel()
	l.wg.Wait()
}

// run listens until ctx ends, connecting again after a failure with a growing pause (at most 5s).
func (l *Listener) run(ctx context.Context, dsn, prefix string, fn func(store.Wakeup), log *slog.Logger) {
	pause := 100 * time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		err := l.listen(ctx, dsn, prefix, fn, !first)
		if ctx.Err() != nil {
			return
		}
		log.Warn("postgres: listener lost its connection; followers on other instances poll until it is back",
			"err", redactErr(err, dsn))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// listen connects, listens, and hands on notifications until the connection fails or ctx ends.
func (l *Listener) listen(ctx context.Context, dsn, prefix string, fn func(store.Wakeup), again bool) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, c := range []string{chanEvents, chanCancel, chanSession} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{prefix + c}.Sanitize()); err != nil {
			return err
		}
	}
	l.setConnected(true)
	defer l.setConnected(false)
	if again {
		fn(store.Wakeup{Kind: store.WakeAll})
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if w, ok := decodeWakeup(strings.TrimPrefix(n.Channel, prefix), n.Payload); ok {
			fn(w)
		}
	}
}

// decodeWakeup reads a notification's payload: "RUNID SEQ" on the events channel, a run id on the
// cancel channel, a session id on the session channel.
func decodeWakeup(channel, payload string) (store.Wakeup, bool) {
	switch channel {
	case chanEvents:
		id, seq, ok := strings.Cut(payload, " ")
		n, err := strconv.ParseInt(seq, 10, 64)
		if !ok || err != nil {
			return store.Wakeup{}, false
		}
		return store.Wakeup{Kind: store.WakeEvents, RunID: id, Seq: n}, true
	case chanCancel:
		return store.Wakeup{Kind: store.WakeCancel, RunID: payload}, true
	case chanSession:
		return store.Wakeup{Kind: store.WakeSession, SessionID: payload}, true
	}
	return store.Wakeup{}, false
}
