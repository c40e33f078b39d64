package openai

import "sync"

// maxPooledBytes is the largest buffer a bufPool keeps: above most
// conversations' request bodies and answers, far below DefaultMaxBodyBytes.
const maxPooledBytes = 64 << 10

// bufPool lends the door's byte buffers: request bodies read, answers and
// event streams encoded. A busy door reuses them instead of growing new
// ones for every request; a buffer grown past maxPooledBytes is dropped
// when it is returned, so one huge body does not stay pinned in the pool.
// The zero value is ready to use.
type bufPool struct{ p sync.Pool }

// get returns an empty buffer; put it back when done with its bytes.
func (bp *bufPool) get() *[]byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

// put returns b, unless it grew past maxPooledBytes. Nothing may use b's
// bytes after.
func (bp *bufPool) put(b *[]byte) {
	if cap(*b) > maxPooledBytes {
		return
	}
	*b = (*b)[:0]
	bp.p.Put(b)
}
