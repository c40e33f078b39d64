package provider

import "testing"

// TestVendorImageTokens: each vendor's published image token formula —
// OpenAI's 512-pixel tiles, Claude's width×height/750 — on the examples
// the vendors' own documentation works through.
func TestVendorImageTokens(t *testing.T) {
	tests := []struct {
		name   string
		vendor string
		give   Image
		want   int
	}{
		{"openai low detail", "openai", Image{Width: 4096, Height: 8192, Detail: "low"}, 85},
		{"openai 1024 square", "openai", Image{Width: 1024, Height: 1024, Detail: "high"}, 765},      // scaled to 768: 4 tiles
		{"openai 2048x4096", "openai", Image{Width: 2048, Height: 4096}, 1105},                       // 1024×2048, then 768×1536: 6 tiles
		{"openai small", "openai", Image{Width: 800, Height: 600}, 765},                              // 2×2 tiles
		{"openai one tile", "openai", Image{Width: 500, Height: 300}, 255},                           // 1 tile
		{"claude on anthropic", "anthropic", Image{Width: 1092, Height: 1092}, 1590},                 // Anthropic's table
		{"claude on bedrock", "bedrock", Image{Width: 800, Height: 600}, 640},                        // 800×600/750
		{"claude scaled down", "bedrock", Image{Width: 3136, Height: 3136}, ImageTokens(1568, 1568)}, // fit to 1568 first
		{"the simulator", "sim", Image{Width: 800, Height: 600}, 640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VendorImageTokens(tt.vendor, tt.give); got != tt.want {
				t.Fatalf("VendorImageTokens(%s, %d×%d %q) = %d, want %d", tt.vendor, tt.give.Width, tt.give.Height, tt.give.Detail, got, tt.want)
			}
		})
	}
}
