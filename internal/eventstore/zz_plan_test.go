package eventstore

import (
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestScratchPlan(t *testing.T) {
	path := os.Getenv("PLAN_DB")
	if path == "" {
		t.Skip()
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&"+pragmas(true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	db.QueryRow(`SELECT sqlite_version()`).Scan(&v)
	fmt.Println("sqlite", v)
	var args []any
	for _, a := range strings.Fields(os.Getenv("PLAN_ARGS")) {
		var n int64
		fmt.Sscan(a, &n)
		args = append(args, n)
	}
	for _, q := range strings.Split(os.Getenv("PLAN_SQL"), ";;") {
		rs, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var a, b, c int
			var d string
			rs.Scan(&a, &b, &c, &d)
			fmt.Println(a, b, d)
		}
		rs.Close()
		start := time.Now()
		rs, err = db.Query(q, args...)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rs.Next() {
			n++
		}
		rs.Close()
		fmt.Println(n, "rows in", time.Since(start))
	}
}
