package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/ratelimit"
)

// TestLoadConcurrentStreams is a bounded load run, opt-in because it takes
// minutes: FMGATE_LOAD_STREAMS=N opens N WebSocket connections, each
// streaming one answer from the simulator at its default Sonnet pace
// (~60 tok/s), and reports the heap held per live stream.
//
//	FMGATE_LOAD_STREAMS=2000 go test -run TestLoadConcurrentStreams -v -timeout 30m ./internal/server/
func TestLoadConcurrentStreams(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FMGATE_LOAD_STREAMS"))
	if n <= 0 {
		t.Skip("set FMGATE_LOAD_STREAMS=N to run the load test")
	}
	cfg := config.Default()
	cfg.RateLimit.Global = ratelimit.Rule{Limit: ratelimit.PerSecond(1_000_000, 1_000_000)}
	cfg.RateLimit.Routes = nil
	for m, c := range cfg.Quota.Models {
		c.TPM, c.RPM = 1<<40, 1<<40
		cfg.Quota.Models[m] = c
	}
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 60*time.Second, 50*time.Second
	_, srv := startServer(t, cfg)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var done, failed, chunks atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c, _, err := websocket.Dial(ctx, url, nil)
			if err != nil {
				failed.Add(1)
				started <- struct{}{}
				return
			}
			defer c.CloseNow()
			msg, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": "r", "sessionId": fmt.Sprint("s", i),
				"userId": fmt.Sprint("load-", i), "message": "おすすめの少年漫画を詳しく教えてください", "locale": "ja"})
			c.Write(ctx, websocket.MessageText, msg)
			first := true
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					failed.Add(1)
					return
				}
				var f struct{ Type string }
				json.Unmarshal(data, &f)
				switch f.Type {
				case "chunk":
					chunks.Add(1)
					if first {
						first = false
						started <- struct{}{}
					}
				case "done":
					done.Add(1)
					return
				case "error":
					failed.Add(1)
					if first {
						started <- struct{}{}
					}
					return
				}
			}
		}()
	}
	for range n {
		<-started
	}
	// Every stream has begun and most are mid-answer: measure now.
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	wg.Wait()
	per := float64(during.HeapInuse-before.HeapInuse) / float64(n)
	t.Logf("%d concurrent streams: %d done, %d failed, %d chunks; heap in use %.1f MiB → %.1f MiB (%.1f KiB per stream, client side included); goroutines at peak measured after all started",
		n, done.Load(), failed.Load(), chunks.Load(), float64(before.HeapInuse)/(1<<20), float64(during.HeapInuse)/(1<<20), per/1024)
	if failed.Load() > 0 {
		t.Fatalf("%d streams failed", failed.Load())
	}
}
