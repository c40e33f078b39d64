package pgstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
)

// copyData is a table's rows in COPY's binary format, written field by
// field in the table's column order: the ingester copies every span this
// way, and writing the format directly costs a fraction of converting
// each value through pgx's type map.
//
// Each row starts with row and then has exactly as many fields as its
// table has columns; a field's Go type must be the column's (bigint:
// int8, smallint: int2, double precision: float8, text: text, bytea:
// bytea, boolean: boolean).
type copyData struct {
	b     []byte
	rows  int
	ended bool
}

// copySignature opens every binary COPY stream: the signature, no flags
// and no header extension.
var copySignature = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

func newCopyData(sizeHint int) *copyData {
	c := &copyData{b: make([]byte, 0, len(copySignature)+sizeHint+2)}
	c.b = append(c.b, copySignature...)
	return c
}

// row starts a row of n fields.
func (c *copyData) row(n int) {
	c.b = binary.BigEndian.AppendUint16(c.b, uint16(n))
	c.rows++
}

func (c *copyData) int8(v int64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(v))
}

func (c *copyData) int2(v int16) {
	c.b = binary.BigEndian.AppendUint32(c.b, 2)
	c.b = binary.BigEndian.AppendUint16(c.b, uint16(v))
}

func (c *copyData) float8(v float64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, math.Float64bits(v))
}

// nullFloat8 writes v, or NULL when v is nil.
func (c *copyData) nullFloat8(v *float64) {
	if v == nil {
		c.null()
		return
	}
	c.float8(*v)
}

// text writes s; a NUL byte, which a PostgreSQL text cannot hold, is
// written as U+FFFD (the record, a bytea, keeps s as it is).
func (c *copyData) text(s string) {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

// bytea writes b, or NULL when b is nil.
func (c *copyData) bytea(b []byte) {
	if b == nil {
		c.null()
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(b)))
	c.b = append(c.b, b...)
}

func (c *copyData) boolean(v bool) {
	c.b = binary.BigEndian.AppendUint32(c.b, 1)
	if v {
		c.b = append(c.b, 1)
	} else {
		c.b = append(c.b, 0)
	}
}

func (c *copyData) null() { c.b = binary.BigEndian.AppendUint32(c.b, math.MaxUint32) }

// bytes ends the stream, the first time, and returns it; nothing may be
// added after.
func (c *copyData) bytes() []byte {
	if !c.ended {
		c.b = binary.BigEndian.AppendUint16(c.b, math.MaxUint16) // the trailer, -1
		c.ended = true
	}
	return c.b
}

// copyInto copies the rows into table within tx and returns how many
// the server took.
func copyInto(ctx context.Context, tx pgx.Tx, table string, cols []string, c *copyData) (int64, error) {
	if c.rows == 0 {
		return 0, nil
	}
	quoted := make([]string, len(cols))
	for i, col := range cols {
		quoted[i] = pgx.Identifier{col}.Sanitize()
	}
	sql := "COPY " + pgx.Identifier{table}.Sanitize() + " (" + strings.Join(quoted, ", ") + ") FROM STDIN (FORMAT binary)"
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(c.bytes()), sql)
	if err != nil {
		return 0, err
	}
	if n := tag.RowsAffected(); n != int64(c.rows) {
		return n, fmt.Errorf("pgstore: copy into %s took %d of %d rows", table, n, c.rows)
	}
	return int64(c.rows), nil
}
