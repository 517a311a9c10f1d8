package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	_ "time/tzdata" // time zones work on machines without /usr/share/zoneinfo
)

// CurrentTime returns the built-in current_time tool. now nil means time.Now.
func CurrentTime(now func() time.Time) Tool {
	if now == nil {
		now = time.Now
	}
	return currentTime{now: now}
}

type currentTime struct {
	now func() time.Time
}

var currentTimeSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"timezone": {
			"type": "string",
			"description": "IANA time zone name, such as Europe/Paris or America/New_York; default UTC"
		}
	},
	"additionalProperties": false
}`)

func (currentTime) Info() Info {
	return Info{
		Name:        "current_time",
		Description: "Get the current date and time, optionally in an IANA time zone such as Europe/Paris.",
		InputSchema: currentTimeSchema,
		ReadOnly:    true,
		Source:      "builtin",
	}
}

// timeReport is the tool's answer; its field order is the JSON's.
type timeReport struct {
	Time      string `json:"time"`
	Timezone  string `json:"timezone"`
	UTCOffset string `json:"utc_offset"`
	Weekday   string `json:"weekday"`
	Unix      int64  `json:"unix"`
}

func (c currentTime) Call(_ context.Context, args json.RawMessage) (Result, error) {
	var in struct {
		Timezone string `json:"timezone"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return Result{}, fmt.Errorf("current_time: decode arguments: %w", err)
		}
	}
	if in.Timezone == "" {
		in.Timezone = "UTC"
	}
	loc, err := loadZone(in.Timezone)
	if err != nil {
		return Result{}, err
	}
	t := c.now().In(loc)
	out, err := json.Marshal(timeReport{
		Time:      t.Format(time.RFC3339),
		Timezone:  in.Timezone,
		UTCOffset: t.Format("-07:00"),
		Weekday:   t.Weekday().String(),
		Unix:      t.Unix(),
	})
	if err != nil {
		return Result{}, fmt.Errorf("current_time: encode result: %w", err)
	}
	return Result{Content: string(out), Payload: out}, nil
}

// loadZone loads an IANA zone. "Local" is refused: the server's own zone
// means nothing to the user and would leak where the server runs.
func loadZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		shown := name
		if len(shown) > 64 {
			shown = cut(shown, 64) + "…" // an answer names the zone, never echoes whatever was sent
		}
		return nil, fmt.Errorf("unknown time zone %q; use an IANA name such as Europe/Paris or UTC", shown)
	}
	return loc, nil
}
