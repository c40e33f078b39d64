package metrics

// cells caches the children of a metric vector by the indexes of its
// bounded labels, so that observing a span costs slice lookups rather than
// hashing and validating label values each time. A child is created on
// first use, so unused label combinations stay out of the exposition.
// Not safe for concurrent use: Metrics uses it under its mutex.
type cells[T any] struct {
	dims  []*label
	child []T
	made  []bool
	with  func(...string) T // the vector's WithLabelValues
}

func newCells[T any](with func(...string) T, dims ...*label) *cells[T] {
	n := 1
	for _, d := range dims {
		n *= len(d.vals)
	}
	return &cells[T]{dims: dims, child: make([]T, n), made: make([]bool, n), with: with}
}

// at returns the child for the label value indexes idx (one per label).
func (c *cells[T]) at(idx ...int) T {
	k := 0
	for i, d := range c.dims {
		k = k*len(d.vals) + idx[i]
	}
	if !c.made[k] {
		vals := make([]string, len(c.dims))
		for i, d := range c.dims {
			vals[i] = d.vals[idx[i]]
		}
		c.child[k] = c.with(vals...)
		c.made[k] = true
	}
	return c.child[k]
}
