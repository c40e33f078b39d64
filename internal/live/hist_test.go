package live

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistBucketsCoverEveryValueOnce(t *testing.T) {
	prevHi := int64(-1)
	for i := range histBuckets {
		lo, hi := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d (contiguous)", i, lo, prevHi+1)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: index(lo)=%d index(hi)=%d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if lo >= exactBelow && float64(hi-lo+1) > float64(lo)/subBuckets {
			t.Fatalf("bucket %d [%d,%d] wider than 1/16 of its start", i, lo, hi)
		}
		prevHi = hi
	}
	if prevHi != maxValue {
		t.Fatalf("last bucket ends at %d, want %d", prevHi, maxValue)
	}
}

func TestHistQuantile(t *testing.T) {
	seq := func(from, to int64) []int64 {
		var out []int64
		for v := from; v <= to; v++ {
			out = append(out, v)
		}
		return out
	}
	tests := []struct {
		name          string
		give          []int64
		p50, p95, p99 float64
	}{
		// 1..100: the true nearest-rank values are 50, 95, 99; 50 and 51
		// share a bucket [50,51], 95 is the top of [92,95], 99 of [96,99].
		{"one to hundred", seq(1, 100), 50.25, 94.625, 98.625},
		{"exact below 32 ms", []int64{10, 20, 30}, 20, 30, 30},
		{"single sample is exact", []int64{1234}, 1234, 1234, 1234},
		{"equal samples are exact", []int64{777, 777, 777, 777}, 777, 777, 777},
		// 100 lies in [100,103] (interpolated); 1000 in [992,1023], clamped.
		{"interpolated, then clamped to the largest sample", []int64{100, 100, 100, 100, 1000}, 101.875, 1000, 1000},
		{"negative counts as zero", []int64{-5, 0, 1}, 0, 1, 1},
		{"beyond the top is clamped", []int64{5_000_000}, maxValue, maxValue, maxValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hist
			for _, v := range tt.give {
				h.add(v)
			}
			for _, c := range []struct {
				q    float64
				want float64
			}{{0.50, tt.p50}, {0.95, tt.p95}, {0.99, tt.p99}} {
				got, ok := h.quantile(c.q)
				if !ok || got != c.want {
					t.Errorf("quantile(%v) = %v, %v; want %v", c.q, got, ok, c.want)
				}
			}
		})
	}
	var empty hist
	if _, ok := empty.quantile(0.5); ok {
		t.Error("empty histogram reported a quantile")
	}
}

// TestHistErrorBound checks the documented bound against exact
// nearest-rank percentiles on skewed latencies.
func TestHistErrorBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		n := 1 + r.IntN(5000)
		vals := make([]int64, n)
		var h hist
		for i := range vals {
			vals[i] = int64(math.Exp(r.NormFloat64()*1.2 + 6)) // median ~400 ms, long tail
			h.add(vals[i])
		}
		slices.Sort(vals)
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 1} {
			want := float64(vals[int(math.Ceil(q*float64(n)))-1])
			got, _ := h.quantile(q)
			if math.Abs(got-want) > want/subBuckets {
				t.Fatalf("round %d n=%d q=%v: got %v, exact %v (error above 1/16)", round, n, q, got, want)
			}
		}
	}
}

func TestHistMerge(t *testing.T) {
	var a, b, all hist
	for v := int64(1); v <= 100; v++ {
		all.add(v)
		if v%2 == 0 {
			a.add(v)
		} else {
			b.add(v)
		}
	}
	var m hist
	m.merge(&a)
	m.merge(&b)
	if m != all {
		t.Fatalf("merge of halves differs from the whole: n=%d min=%d max=%d", m.n, m.min, m.max)
	}
}
