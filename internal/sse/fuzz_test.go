package sse

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// reference is the decoder written the obvious way, for the fuzz target to compare against: the whole
// input split into lines first, then the rules applied line by line.
func reference(in string) []event {
	var (
		evs     []event
		data    []string
		typ, id string
		retry   int
	)
	dispatch := func() {
		if data != nil {
			evs = append(evs, event{Type: typ, ID: id, Data: strings.Join(data, "\n"), Retry: retry})
		}
		data, typ, retry = nil, "", 0
	}
	for _, line := range referenceLines(strings.TrimPrefix(in, "\xEF\xBB\xBF")) {
		if line == "" {
			dispatch()
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			typ = value
		case "data":
			data = append(data, value)
		case "id":
			if !strings.Contains(value, "\x00") {
				id = value
			}
		case "retry":
			if n, err := strconv.Atoi(value); err == nil && strings.Trim(value, "0123456789") == "" {
				retry = n
			}
		}
	}
	dispatch() // the end of the stream dispatches too
	return evs
}

// referenceLines splits in at CRLF, LF and CR; text after the last line ending is a line too.
func referenceLines(in string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '\r':
			lines = append(lines, in[start:i])
			if i+1 < len(in) && in[i+1] == '\n' {
				i++
			}
			start = i + 1
		case '\n':
			lines = append(lines, in[start:i])
			start = i + 1
		}
	}
	if start < len(in) {
		lines = append(lines, in[start:])
	}
	return lines
}

// FuzzScan compares Scan with the reference on any input, read in chunks of any size. With a limit
// small enough to trip, the events before ErrTooLarge must still be the reference's first events.
func FuzzScan(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.sse")
	for _, file := range files {
		in, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(in, uint16(0))
		f.Add(in, uint16(7))
	}
	for _, in := range []string{
		"data: a\r\n\r\n", "data: a\r\rdata: b\r", "\xEF\xBB\xBFdata: a\n\n", ": c\ndata\ndata:\n\n",
		"id: 1\n\nid: 2\x00\ndata: a", "retry: 12\nretry: x\ndata: a\n\n", "event: e\nfoo\ndata: a",
		"data: a\r", "\r\n\r\n\n\r", "retry: 99999999999999999999\ndata: a\n\n",
	} {
		f.Add([]byte(in), uint16(1))
		f.Add([]byte(in), uint16(3<<8|2))
	}
	f.Fuzz(func(t *testing.T, in []byte, shape uint16) {
		chunk := int(shape&0xff) + 1
		want := reference(string(in))
		got, err := events(ScanLimit(&chunkReader{s: string(in), n: chunk}, len(in)+1))
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("reads of %d: Scan and reference differ (-reference +Scan):\n%s", chunk, diff)
		}
		limit := int(shape>>8) + 1
		got, err = events(ScanLimit(&chunkReader{s: string(in), n: chunk}, limit))
		if err != nil && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("limit %d: Scan: %v", limit, err)
		}
		if err != nil && len(got) <= len(want) {
			want = want[:len(got)]
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("limit %d, err %v: Scan and reference differ (-reference +Scan):\n%s", limit, err, diff)
		}
	})
}
