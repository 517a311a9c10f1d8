package upstream

import (
	"encoding/json"
	"errors"
)

// Errors of EventDecoder.Decode, besides encoding/json's.
var (
	ErrCutShort     = errors.New("the event ends inside a JSON value")
	ErrTrailingData = errors.New("the event has data after its JSON value")
)

// EventDecoder decodes the JSON value of one SSE event at a time into a value the caller reuses.
// Unlike json.Unmarshal, one json.Decoder keeps its scanner and error context across values: that
// saves most of the allocations of every streamed chunk. A value cut short (ErrCutShort) or followed by
// more data (ErrTrailingData) is an error, never a wait for bytes that belong to the next event. The
// zero value is ready to use.
type EventDecoder struct {
	json *json.Decoder
	src  eventSource
	fed  int64 // bytes given to json so far
}

// Decode decodes data, one event's JSON value, into v. After a *json.UnmarshalTypeError (a field of
// another type than v's, as a later API version may send) the decoder goes on with the next event.
func (d *EventDecoder) Decode(data []byte, v any) error {
	if d.json == nil {
		d.json, d.fed = json.NewDecoder(&d.src), 0
	}
	d.src.b = data
	d.fed += int64(len(data))
	if err := d.json.Decode(v); err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && d.json.InputOffset() == d.fed {
			return err // the value was read whole: the decoder can go on
		}
		d.json = nil // the Decoder's syntax errors are sticky: start afresh
		return err
	}
	if d.json.InputOffset() != d.fed {
		d.json = nil // the rest is buffered in the Decoder: start afresh
		return ErrTrailingData
	}
	return nil
}

// eventSource serves one event to the JSON decoder, then reports its end.
type eventSource struct{ b []byte }

func (s *eventSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, ErrCutShort
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}
