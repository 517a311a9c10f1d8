package postgres

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Close leaves no pool goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
