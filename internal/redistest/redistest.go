// Package redistest gives tests a real Redis connection and a key prefix of
// their own, so that conformance suites run against the same server in
// parallel without seeing each other's keys.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr is the server tests use: $FMGATE_TEST_REDIS, or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("FMGATE_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Client connects to the test Redis and returns the client and a fresh key
// prefix ending in ':'. The test fails (it does not skip) when Redis is not
// reachable: the Redis implementations are part of what CI must prove. Keys
// under the prefix are deleted when the test ends.
func Client(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         Addr(),
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s is not reachable (start it, or set FMGATE_TEST_REDIS): %v", Addr(), err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "fmgate-test:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c, prefix
}
