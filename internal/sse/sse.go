// Package sse decodes and encodes text/event-stream, the Server-Sent Events wire format: Scan reads
// the events an upstream LLM provider streams, and Writer sends events on to a browser.
//
// Decoding follows the WHATWG HTML "event stream interpretation" with one deviation: a stream that
// ends without a final blank line still dispatches its last event, because LLM servers commonly end
// with "data: [DONE]" and nothing after it.
//
// Every streamed token passes through this package twice, so neither direction allocates per event
// once a stream is running. The package owns the wire format only, not what the data means; it imports
// only the standard library and no other chatd package.
package sse

// Event is one server-sent event.
type Event struct {
	Type  string // the "event:" field; "" when absent (the spec's default "message")
	ID    string // the last event ID at dispatch time (per spec the id buffer persists across events)
	Data  []byte // the data lines joined with '\n'. Scan: valid only until the next iteration; copy to keep.
	Retry int    // the "retry:" value in milliseconds seen in this event's block, 0 when none
}
