package main

import (
	"bytes"
	"context"
	"runtime"
	"testing"
)

// fmgate version names the release, the commit and the Go it was built
// with, from what the release build stamped in.
func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	oldV, oldC := version, commit
	t.Cleanup(func() { version, commit = oldV, oldC })
	version, commit = "1.2.3", "0123abc"
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	want := "fmgate 1.2.3 (commit 0123abc, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if out.String() != want {
		t.Fatalf("fmgate version printed %q, want %q", out.String(), want)
	}
}
