package eventstore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// One key's trail is read from the few turns of the audit feature, by
// their partial index, not by a scan of every turn.
func TestKeyAuditReadsItsIndex(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "events.db"))
	rs, err := s.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+keyAuditSQL, "session", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var plan []string
	for rs.Next() {
		var id, parent, unused int
		var detail string
		if err := rs.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "turns_key_audit") {
		t.Fatalf("query plan %q: want the turns read through turns_key_audit", p)
	}
}
