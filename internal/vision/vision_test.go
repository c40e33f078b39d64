package vision

import (
	"errors"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// webpHeader is the smallest lossless WebP (1×1), whose header the webp
// decoder reads.
const webpHeader = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="

func TestBase64(t *testing.T) {
	pngData, jpegData := visiontest.PNG(800, 600), visiontest.JPEG(64, 48)
	tests := []struct {
		name      string
		lim       Limits
		mediaType string
		data      string
		want      string // the image's String, or a piece of the error
		wantErr   bool
	}{
		{name: "png", mediaType: "image/png", data: visiontest.Base64(pngData), want: "800×600 png"},
		{name: "jpeg", mediaType: "image/jpeg", data: visiontest.Base64(jpegData), want: "64×48 jpeg"},
		{name: "gif", mediaType: "image/gif", data: visiontest.Base64(visiontest.GIF(3, 2)), want: "3×2 gif"},
		{name: "webp", mediaType: "image/webp", data: webpHeader, want: "1×1 webp"},
		{name: "unpadded", mediaType: "image/png", data: strings.TrimRight(visiontest.Base64(visiontest.PNG(5, 5)), "="), want: "5×5 png"},
		{name: "lying media type", mediaType: "image/jpeg", data: visiontest.Base64(pngData), want: "a png image, not image/jpeg", wantErr: true},
		{name: "not an image", mediaType: "image/png", data: visiontest.Base64([]byte("hello, world")), want: "not a image/png image", wantErr: true},
		{name: "bad base64", mediaType: "image/png", data: "!!!not base64!!!", want: "not valid base64", wantErr: true},
		{name: "unknown media type", mediaType: "image/bmp", data: visiontest.Base64(pngData), want: `"image/bmp" is not one of`, wantErr: true},
		{name: "too many bytes", lim: Limits{MaxBytes: 100}, mediaType: "image/png", data: visiontest.Base64(pngData), want: "the limit is 100 bytes (server.images.maxBytes)", wantErr: true},
		{name: "too many pixels", lim: Limits{MaxSide: 700}, mediaType: "image/png", data: visiontest.Base64(pngData), want: "800×600 pixels; the limit is 700", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im, err := NewReader(tt.lim).Base64(tt.mediaType, tt.data)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if im.String() != tt.want || im.MediaType != tt.mediaType || len(im.Data) == 0 {
				t.Errorf("image = %v (%s, %d bytes), want %s", im, im.MediaType, len(im.Data), tt.want)
			}
		})
	}
}

func TestURL(t *testing.T) {
	rd := NewReader(Limits{})
	im, err := rd.URL(visiontest.DataURL("image/png", visiontest.PNG(10, 20)))
	if err != nil || im.String() != "10×20 png" {
		t.Fatalf("URL = %v, %v; want a 10×20 png", im, err)
	}
	for _, url := range []string{"https://example.com/cat.png", "HTTP://example.com/cat.png"} {
		if _, err := rd.URL(url); !errors.Is(err, ErrRemote) {
			t.Errorf("URL(%q) = %v, want ErrRemote", url, err)
		}
	}
	for _, url := range []string{"ftp://x/y.png", "data:image/png,rawbytes", "data:image/png;base64"} {
		if _, err := rd.URL(url); err == nil {
			t.Errorf("URL(%q) = nil error", url)
		}
	}
}

func TestReaderCountsImagesPerRequest(t *testing.T) {
	rd := NewReader(Limits{MaxPerRequest: 2})
	data := visiontest.Base64(visiontest.PNG(2, 2))
	for i := range 2 {
		if _, err := rd.Base64("image/png", data); err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	if _, err := rd.Base64("image/png", data); err == nil || !strings.Contains(err.Error(), "at most 2 images (server.images.maxPerRequest)") {
		t.Fatalf("third image: err = %v, want the per-request limit", err)
	}
}

func TestImageTokens(t *testing.T) {
	tests := []struct {
		w, h, want int
	}{
		{800, 600, 640},    // 480000/750
		{1000, 1000, 1334}, // 1e6/750 = 1333.3, rounded up
		{3136, 1568, 1640}, // scaled to 1568×784: 1229312/750
		{8000, 8000, 3279}, // scaled to 1568×1568
		{1, 1, 1},          // never less than a token
		{0, 10, 0},
	}
	for _, tt := range tests {
		if got := provider.ImageTokens(tt.w, tt.h); got != tt.want {
			t.Errorf("ImageTokens(%d, %d) = %d, want %d", tt.w, tt.h, got, tt.want)
		}
	}
}
