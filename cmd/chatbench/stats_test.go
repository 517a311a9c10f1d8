package main

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"none", nil, 50, 0},
		{"one", []int64{7}, 99, 7},
		{"median of odd", []int64{1, 2, 3}, 50, 2},
		{"median of even: the lower", []int64{1, 2, 3, 4}, 50, 2},
		{"p99 of 100", hundred, 99, 99},
		{"p99 of 3: the largest", []int64{1, 2, 3}, 99, 3},
		{"p100", hundred, 100, 100},
		{"p0: the smallest", hundred, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %d, want %d", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestCountStalls(t *testing.T) {
	const ms = int64(1e6)
	// at returns receive times with the given gaps, in ms.
	at := func(gaps ...float64) []int64 {
		v := []int64{0}
		for _, g := range gaps {
			v = append(v, v[len(v)-1]+int64(g*float64(ms)))
		}
		return v
	}
	tests := []struct {
		name string
		recv []int64
		want int
	}{
		{"none", nil, 0},
		{"two tokens: no median to judge by", at(500), 0},
		{"steady", at(20, 20, 20, 20), 0},
		{"one long gap", at(20, 20, 100, 20, 20), 1},
		{"exactly twice the median is not a stall", at(20, 20, 40, 20), 0},
		{"coalesced: below the 1 ms floor", at(0.01, 0.01, 0.5, 0.01), 0},
		{"coalesced, then a real gap", at(0.01, 0.01, 5, 0.01), 1},
		{"two", at(20, 90, 20, 90, 20, 20), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countStalls(tt.recv); got != tt.want {
				t.Errorf("countStalls = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd: %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even: %v", got)
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("none: %v, want NaN", got)
	}
	v := []float64{3, 1, 2}
	median(v)
	if v[0] != 3 {
		t.Error("median reordered its argument")
	}
}
