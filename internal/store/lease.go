package store

// Leased is a queued or running run held by the instance that asked, as its renewal found it.
type Leased struct {
	ID, SessionID, UserID, Status string
	// CancelReason is a cancel asked on another instance ("" none): the owner carries it out.
	CancelReason string
}

// Claimed is a run whose owner's lease had expired, now held by the instance that claimed it: a running
// run to recover, or a queued run to start.
type Claimed struct {
	Run // with UserID and Request, as UnfinishedRuns gives them
	// CancelReason is a cancel asked while the run had no live owner ("" none).
	CancelReason string
}

// Kinds of Wakeup.
const (
	// WakeEvents: a run's log holds new events, up to Seq (or the run ended).
	WakeEvents = "events"
	// WakeCancel: a cancel of RunID was asked on another instance.
	WakeCancel = "cancel"
	// WakeSession: a run of SessionID ended: its next queued run may start.
	WakeSession = "session"
	// WakeAll: notifications may have been lost (the listener reconnected): look at everything.
	WakeAll = "all"
)

// Wakeup is a notification one chatd instance sends the others through the database. It carries ids
// only; what changed is read from the store, which stays the source of truth.
type Wakeup struct {
	Kind      string
	RunID     string
	SessionID string
	Seq       int64
}
