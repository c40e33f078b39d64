package live

import (
	"math"
	"math/bits"
)

// The latency and time-to-first-token figures are kept in a small
// log-linear histogram of whole milliseconds, one per second of the window,
// so that Write is O(1), memory is fixed whatever the traffic, and merging
// a window costs the same at 1 turn/s as at 10,000.
//
// Layout: values 0..31 ms have a bucket each (exact). Above, every power of
// two [2^e, 2^(e+1)) is split into 16 equal buckets of width 2^(e-4), up to
// 2^20 ms (about 17.5 minutes); larger values are counted as 2^20−1 ms.
//
// Error: a percentile is the nearest-rank sample (the ceil(q·n)-th smallest
// in the window). The histogram finds the bucket that holds it and
// interpolates linearly inside that bucket, then clamps to the smallest and
// largest value seen in the window. The estimate therefore lies in the same
// bucket as the true value, so it is exact below 32 ms and otherwise off by
// less than one bucket width: under 1/16 (6.25%) of the true value. With a
// single sample, or when all samples are equal, it is exact.
const (
	subBits     = 4
	subBuckets  = 1 << subBits   // buckets per power of two
	exactBelow  = 2 * subBuckets // values below this have a bucket each
	topExponent = 19             // the last power of two kept: [2^19, 2^20)
	maxValue    = 1<<(topExponent+1) - 1
	histBuckets = exactBelow + (topExponent-subBits)*subBuckets
)

type hist struct {
	counts   [histBuckets]uint32
	n        uint32
	min, max int64
}

func (h *hist) reset() { *h = hist{} }

func (h *hist) add(v int64) {
	v = min(max(v, 0), maxValue)
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if h.n == 0 || v > h.max {
		h.max = v
	}
	h.counts[histIndex(v)]++
	h.n++
}

// merge adds o into h.
func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// histIndex returns the bucket of v, 0 <= v <= maxValue.
func histIndex(v int64) int {
	if v < exactBelow {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // >= subBits+1
	m := int(v>>(e-subBits)) & (subBuckets - 1)
	return exactBelow + (e-subBits-1)*subBuckets + m
}

// histBounds returns the smallest and largest value of bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < exactBelow {
		return int64(i), int64(i)
	}
	j := i - exactBelow
	e := j/subBuckets + subBits + 1
	m := int64(j % subBuckets)
	width := int64(1) << (e - subBits)
	lo = (subBuckets + m) * width
	return lo, lo + width - 1
}

// quantile returns the estimated nearest-rank q-quantile (0 < q <= 1), and
// false when the histogram is empty.
func (h *hist) quantile(q float64) (float64, bool) {
	if h.n == 0 {
		return 0, false
	}
	k := int64(math.Ceil(q * float64(h.n)))
	k = min(max(k, 1), int64(h.n))
	var cum int64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if cum+int64(c) < k {
			cum += int64(c)
			continue
		}
		lo, hi := histBounds(i)
		v := float64(lo) + float64(hi-lo)*(float64(k-cum)-0.5)/float64(c)
		return min(max(v, float64(h.min)), float64(h.max)), true
	}
	return float64(h.max), true // unreachable: counts sum to n
}
