package main

import (
	"math"
	"slices"
)

// stallFloor keeps a stream whose tokens arrive coalesced (a median gap near zero) from counting every
// ordinary gap as a stall.
const stallFloor int64 = 1e6 // 1 ms in ns

// percentile is the nearest-rank p-th percentile (0–100) of sorted values; 0 when there are none.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// countStalls counts the gaps between consecutive receive times (ns) longer than twice the stream's
// median gap, and at least stallFloor. A stream of fewer than three tokens has no median to judge by.
func countStalls(recv []int64) int {
	if len(recv) < 3 {
		return 0
	}
	gaps := make([]int64, len(recv)-1)
	for i := range gaps {
		gaps[i] = recv[i+1] - recv[i]
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	limit := max(2*sorted[len(sorted)/2], stallFloor)
	n := 0
	for _, g := range gaps {
		if g > limit {
			n++
		}
	}
	return n
}

// median of values: the middle one, or the mean of the two middle ones; NaN when there are none.
func median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// micros converts nanoseconds to microseconds rounded to 0.1.
func micros(ns int64) float64 { return math.Round(float64(ns)/100) / 10 }
