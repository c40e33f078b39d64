package stream

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigFromYAML(t *testing.T) {
	in := `
flushInterval: 50ms
maxBufferBytes: 2048
maxFrameBytes: 16384
heartbeatInterval: 10s
maxDuration: 2m
sendTimeout: 250ms
backpressurePause: 1s
maxBackpressurePauses: 5
maxPendingBytes: 8192
`
	var got Config
	if err := yaml.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	want := Config{
		FlushInterval: 50 * time.Millisecond, MaxBufferBytes: 2048, MaxFrameBytes: 16384,
		HeartbeatInterval: 10 * time.Second, MaxDuration: 2 * time.Minute, SendTimeout: 250 * time.Millisecond,
		BackpressurePause: time.Second, MaxBackpressurePauses: 5, MaxPendingBytes: 8192,
	}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want []string
	}{
		{name: "defaults are valid", give: func(*Config) {}},
		{name: "zero flush", give: func(c *Config) { c.FlushInterval = 0 }, want: []string{"flushInterval: must be > 0"}},
		{name: "tiny frames", give: func(c *Config) { c.MaxFrameBytes = 100 }, want: []string{"maxFrameBytes: must be >= 256"}},
		{name: "pending below buffer", give: func(c *Config) { c.MaxPendingBytes = 1024 }, want: []string{"maxPendingBytes: must be >= maxBufferBytes"}},
		{
			name: "every problem reported",
			give: func(c *Config) { c.SendTimeout, c.MaxBackpressurePauses, c.HeartbeatInterval = -1, 0, 0 },
			want: []string{"sendTimeout: must be > 0", "maxBackpressurePauses: must be > 0", "heartbeatInterval: must be > 0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestZeroConfigMeansDefaults(t *testing.T) {
	if got := (Config{}).withDefaults(); got != DefaultConfig() {
		t.Fatalf("zero config = %+v", got)
	}
}
