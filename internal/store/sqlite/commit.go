package sqlite

import (
	"context"
	"errors"
	"fmt"
)

// Group commit. Every write of the store is a function run in a write transaction, and each commit
// syncs the WAL (synchronous=FULL): an acknowledged write survives a power cut. One commit per write
// made concurrent writers queue behind one another's fsyncs. Instead, one goroutine, the committer,
// takes every write waiting when it is free and runs them in one transaction, each inside a savepoint,
// and commits once: writers that arrive while a commit syncs share the next one. A write that fails rolls
// back to its savepoint and fails alone; a failed commit fails the whole batch. No write waits for
// company: a lone write commits at once, as before.

// maxBatch bounds the writes one commit carries, so that a flood of writers cannot make one batch's
// writers wait for many others' work.
const maxBatch = 128

// writeReq is one write waiting for the committer.
type writeReq struct {
	ctx  context.Context
	op   string
	fn   func(tx txn) error
	done chan error // buffered: the committer never waits for the writer
}

// errClosed is the failure of a write made after Close.
var errClosed = errors.New("the database is closed")

// startCommitter starts the goroutine that runs the writes; Close stops it.
func (db *DB) startCommitter() {
	db.writes = make(chan *writeReq, maxBatch)
	db.quit = make(chan struct{})
	db.committerDone = make(chan struct{})
	go db.commitLoop()
}

// write runs fn in a write transaction, shared with the writes that wait with it, and returns once it is
// committed — or fn's error, wrapped with the operation's name, constraint violations as
// store.ErrConflict. A write whose ctx ends before the committer takes it is not run.
func (db *DB) write(ctx context.Context, op string, fn func(tx txn) error) error {
	req := &writeReq{ctx: ctx, op: op, fn: fn, done: make(chan error, 1)}
	select {
	case db.writes <- req:
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: %w", op, ctx.Err())
	case <-db.committerDone:
		return fmt.Errorf("sqlite: %s: %w", op, errClosed)
	}
	select {
	case err := <-req.done:
		return err
	case <-db.committerDone:
		select { // it may have answered just before it stopped
		case err := <-req.done:
			return err
		default:
			return fmt.Errorf("sqlite: %s: %w", op, errClosed)
		}
	}
}

// commitLoop runs batches of writes until Close; then it runs what is already waiting, and stops.
func (db *DB) commitLoop() {
	defer close(db.committerDone)
	batch := make([]*writeReq, 0, maxBatch)
	for {
		select {
		case req := <-db.writes:
			batch = append(batch[:0], req)
		case <-db.quit:
			for {
				batch = db.waiting(batch[:0])
				if len(batch) == 0 {
					return
				}
				db.commit(batch)
			}
		}
		db.commit(db.waiting(batch))
	}
}

// waiting adds to batch the writes waiting now, up to maxBatch.
func (db *DB) waiting(batch []*writeReq) []*writeReq {
	for len(batch) < maxBatch {
		select {
		case req := <-db.writes:
			batch = append(batch, req)
		default:
			return batch
		}
	}
	return batch
}

// commit runs a batch of writes in one transaction and answers each.
func (db *DB) commit(batch []*writeReq) {
	db.commits.Add(1)
	errs := make([]error, len(batch))
	if len(batch) == 1 {
		errs[0] = db.commitOne(batch[0])
	} else {
		db.commitMany(batch, errs)
	}
	for i, req := range batch {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("sqlite: %s: %w", req.op, mapErr(errs[i]))
		}
		req.done <- errs[i]
	}
}

// commitOne runs a lone write as its own transaction: no savepoint is needed to fail it alone.
func (db *DB) commitOne(req *writeReq) error {
	if err := req.ctx.Err(); err != nil {
		return err
	}
	tx, err := db.writer.BeginTx(context.WithoutCancel(req.ctx), nil)
	if err != nil {
		return err
	}
	if err := run(req, txn{tx, db.writeStmts}); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// commitMany runs each write of the batch inside a savepoint of one transaction, and commits once.
func (db *DB) commitMany(batch []*writeReq, errs []error) {
	tx, err := db.writer.BeginTx(context.Background(), nil)
	if err != nil {
		fill(errs, err)
		return
	}
	ran := false
	for i, req := range batch {
		if errs[i] = req.ctx.Err(); errs[i] != nil {
			continue
		}
		if _, err := tx.Exec("SAVEPOINT write"); err != nil {
			tx.Rollback()
			fill(errs, err)
			return
		}
		if errs[i] = run(req, txn{tx, db.writeStmts}); errs[i] != nil {
			if _, err := tx.Exec("ROLLBACK TO write"); err != nil {
				// The transaction cannot go on (SQLite rolled it back on an I/O or full-disk error):
				// none of the batch is stored.
				tx.Rollback()
				fill(errs, err)
				return
			}
		}
		if _, err := tx.Exec("RELEASE write"); err != nil {
			tx.Rollback()
			fill(errs, err)
			return
		}
		ran = ran || errs[i] == nil
	}
	if !ran {
		tx.Rollback()
		return
	}
	if err := tx.Commit(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
}

// run calls a write's function; a panic fails the write (and is re-raised as an error, not lost).
func run(req *writeReq, tx txn) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic in write: %v", v)
		}
	}()
	return req.fn(tx)
}

// fill gives every write of a batch that failed whole the same error.
func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}
