package tool

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCurrentTime(t *testing.T) {
	winter := time.Date(2026, 11, 21, 8, 46, 0, 0, time.UTC)
	summer := time.Date(2026, 7, 14, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		now  time.Time
		args string
		want string // the content, or the failure
		ok   bool
	}{
		{
			name: "UTC by default",
			now:  winter,
			args: `{}`,
			want: `{"time":"2026-11-21T08:46:00Z","timezone":"UTC","utc_offset":"+00:00","weekday":"Saturday","unix":1795250760}`,
			ok:   true,
		},
		{
			name: "empty zone is UTC",
			now:  winter.Add(999 * time.Millisecond),
			args: `{"timezone":""}`,
			want: `{"time":"2026-11-21T08:46:00Z","timezone":"UTC","utc_offset":"+00:00","weekday":"Saturday","unix":1795250760}`,
			ok:   true,
		},
		{
			name: "Paris in winter",
			now:  winter,
			args: `{"timezone":"Europe/Paris"}`,
			want: `{"time":"2026-11-21T09:46:00+01:00","timezone":"Europe/Paris","utc_offset":"+01:00","weekday":"Saturday","unix":1795250760}`,
			ok:   true,
		},
		{
			name: "Paris in summer",
			now:  summer,
			args: `{"timezone":"Europe/Paris"}`,
			want: `{"time":"2026-07-14T12:00:00+02:00","timezone":"Europe/Paris","utc_offset":"+02:00","weekday":"Tuesday","unix":1784023200}`,
			ok:   true,
		},
		{
			name: "Kathmandu",
			now:  winter,
			args: `{"timezone":"Asia/Kathmandu"}`,
			want: `{"time":"2026-11-21T14:31:00+05:45","timezone":"Asia/Kathmandu","utc_offset":"+05:45","weekday":"Saturday","unix":1795250760}`,
			ok:   true,
		},
		{
			name: "west of UTC, the day before",
			now:  time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC),
			args: `{"timezone":"America/Los_Angeles"}`,
			want: `{"time":"2026-11-20T18:00:00-08:00","timezone":"America/Los_Angeles","utc_offset":"-08:00","weekday":"Friday","unix":1795226400}`,
			ok:   true,
		},
		{
			name: "unknown zone",
			now:  winter,
			args: `{"timezone":"Mars/Base"}`,
			want: `unknown time zone "Mars/Base"; use an IANA name such as Europe/Paris or UTC`,
		},
		{
			name: "server's local zone",
			now:  winter,
			args: `{"timezone":"Local"}`,
			want: `unknown time zone "Local"; use an IANA name such as Europe/Paris or UTC`,
		},
		{
			name: "path outside the zone database",
			now:  winter,
			args: `{"timezone":"../../etc/passwd"}`,
			want: `unknown time zone "../../etc/passwd"; use an IANA name such as Europe/Paris or UTC`,
		},
		{
			name: "unknown parameter",
			now:  winter,
			args: `{"tz":"Europe/Paris"}`,
			want: "invalid arguments for current_time:\n- (root): additional properties 'tz' not allowed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			r := newTestRegistry(t, Options{}, CurrentTime(func() time.Time { return now }))
			got := summarize(r.Call(t.Context(), "current_time", json.RawMessage(tt.args)))
			want := outcome{Arguments: tt.args, Content: tt.want, Success: tt.ok}
			if tt.ok {
				want.Payload = tt.want
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("current_time(%s) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestCurrentTimeInfo(t *testing.T) {
	info := CurrentTime(nil).Info()
	if info.Name != "current_time" || !info.ReadOnly || info.Source != "builtin" || info.Description == "" {
		t.Errorf("Info = %+v", info)
	}
}

func BenchmarkCallCurrentTime(b *testing.B) {
	r := NewRegistry(Options{})
	defer r.Close()
	if err := r.Register(CurrentTime(nil)); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	args := json.RawMessage(`{"timezone":"Europe/Paris"}`)
	b.ReportAllocs()
	for b.Loop() {
		if out := r.Call(ctx, "current_time", args); !out.Success {
			b.Fatal(out.Content)
		}
	}
}

// TestCurrentTimeDoesNotEchoItsArgument: an unknown zone is named in the error, not repeated whole (a
// 100 MB argument came back in the error).
func TestCurrentTimeDoesNotEchoItsArgument(t *testing.T) {
	r := NewRegistry(Options{})
	defer r.Close()
	if err := r.Register(CurrentTime(nil)); err != nil {
		t.Fatal(err)
	}
	out := r.Call(t.Context(), "current_time", json.RawMessage(`{"timezone":"`+strings.Repeat("Europe/Paris", 10_000)+`"}`))
	if out.Success || len(out.Content) > 200 || !strings.Contains(out.Content, "unknown time zone") {
		t.Errorf("current_time with a 120 KB zone answered %d bytes: %.120q", len(out.Content), out.Content)
	}
}
