// Package fleet holds the fleet recipe's test: run.sh, as an operator runs
// it, against the Redis, NATS and PostgreSQL of the machine.
package fleet

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRecipe runs run.sh with CHECK_ONLY=1: it builds fmgate, starts two
// gateways and an ingester from fleet.yaml, and passes only when the second
// turn of a conversation, asked of the other instance, knows the first.
func TestRecipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./run.sh")
	cmd.Env = append(os.Environ(), "CHECK_ONLY=1", "WORK="+t.TempDir(),
		"PORT1="+freePort(t), "PORT2="+freePort(t))
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: the conversation moved from gw1 to gw2") {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "mode: fleet") {
		t.Errorf("the gateway's banner does not say it runs as a fleet:\n%s", out)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
