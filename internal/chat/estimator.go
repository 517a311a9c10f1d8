package chat

import (
	"sync"

	"chatd/internal/prompt"
)

// maxCalibrations bounds the models calibrated at once.
const maxCalibrations = 256

// maxEstimates bounds the sessions whose token estimates are kept between runs.
const maxEstimates = 1024

// estimator keeps what token estimates learn across runs: each model's calibration, by the input tokens
// its provider reported, and each session's record estimates between its runs. It is safe for
// concurrent use; a run's conversation is its only user.
type estimator struct {
	mu        sync.Mutex
	calib     map[string]*prompt.Calibration // by provider/model
	estimates map[string]*prompt.Estimates   // by session id
}

func newEstimator() *estimator {
	return &estimator{calib: map[string]*prompt.Calibration{}, estimates: map[string]*prompt.Estimates{}}
}

// calibrated returns an estimate corrected by what the model's provider reported before.
func (e *estimator) calibrated(model string, estimate int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.calib[model]
	if c == nil {
		return estimate
	}
	return c.Apply(estimate)
}

// ratio is the model's calibration ratio: 1 until its provider has reported.
func (e *estimator) ratio(model string) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.calib[model]; c != nil {
		return c.Ratio()
	}
	return 1
}

// calibrate learns from the input tokens (actual) the provider reported for a request estimated at
// estimate.
func (e *estimator) calibrate(model string, estimate, actual int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.calib[model]
	if c == nil {
		if len(e.calib) >= maxCalibrations {
			clear(e.calib) // models come from configuration, but a request may name any
		}
		c = new(prompt.Calibration)
		e.calib[model] = c
	}
	c.Observe(estimate, actual)
}

// take returns the token estimates a session's last run kept, or new ones. A run has them to itself:
// they are taken out, and kept again when it ends.
func (e *estimator) take(session string) *prompt.Estimates {
	e.mu.Lock()
	defer e.mu.Unlock()
	if est := e.estimates[session]; est != nil {
		delete(e.estimates, session)
		return est
	}
	return new(prompt.Estimates)
}

// keep holds a session's estimates for its next run.
func (e *estimator) keep(session string, est *prompt.Estimates) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.estimates) >= maxEstimates {
		clear(e.estimates)
	}
	e.estimates[session] = est
}
