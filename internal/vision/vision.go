// Package vision reads the images a vendor front door's request carries
// inline (base64 data or a data URL) and holds them to the operator's
// bounds: size after decoding, count per request, pixels per side. It
// checks that the bytes are an image of the media type declared, by
// decoding the image's header, so a model is never sent a file that its
// vendor would refuse or misread.
package vision

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registers the GIF header decoder
	_ "image/jpeg"
	_ "image/png"
	"slices"
	"strings"

	_ "golang.org/x/image/webp" // registers the WebP header decoder

	"github.com/fmgate/fmgate/internal/provider"
)

// Defaults of Limits.
const (
	DefaultMaxBytes      = 5 << 20
	DefaultMaxPerRequest = 20
	DefaultMaxSide       = 8000
)

// Limits bound the images of one request; a zero field is its default.
type Limits struct {
	// MaxBytes bounds one image after decoding. Default DefaultMaxBytes
	// (5 MiB), Anthropic's and Bedrock's limit.
	MaxBytes int
	// MaxPerRequest bounds the images of one request, the whole
	// conversation's. Default DefaultMaxPerRequest (20).
	MaxPerRequest int
	// MaxSide bounds an image's width and height in pixels. Default
	// DefaultMaxSide (8000), the vendors' limit.
	MaxSide int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxPerRequest <= 0 {
		l.MaxPerRequest = DefaultMaxPerRequest
	}
	if l.MaxSide <= 0 {
		l.MaxSide = DefaultMaxSide
	}
	return l
}

// ErrRemote is the refusal of an image given by its address: fmgate takes
// images inline only, and fetches nothing on a client's behalf.
var ErrRemote = errors.New("remote image URLs are off: fmgate fetches no images; send the image inline, base64-encoded")

// Reader reads the images of one request, counting them against its
// limits. It is not safe for concurrent use.
type Reader struct {
	lim Limits
	n   int
}

// NewReader reads images under lim.
func NewReader(lim Limits) *Reader { return &Reader{lim: lim.withDefaults()} }

// Base64 reads an image given as its media type and its bytes in standard
// base64 (padding optional).
func (r *Reader) Base64(mediaType, data string) (provider.Image, error) {
	if err := r.count(); err != nil {
		return provider.Image{}, err
	}
	if !slices.Contains(provider.ImageMediaTypes, mediaType) {
		return provider.Image{}, fmt.Errorf("media type %q is not one of %s", trim(mediaType), strings.Join(provider.ImageMediaTypes, ", "))
	}
	data = strings.TrimRight(data, "=")
	if n := base64.RawStdEncoding.DecodedLen(len(data)); n > r.lim.MaxBytes {
		return provider.Image{}, r.tooLarge(n)
	}
	raw, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil {
		return provider.Image{}, fmt.Errorf("the image data is not valid base64: %w", err)
	}
	return r.check(mediaType, raw)
}

// DataURL reads an image given as a data URL
// (data:image/png;base64,…). An http or https URL is ErrRemote.
func (r *Reader) DataURL(url string) (provider.Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		if scheme, _, _ := strings.Cut(url, ":"); strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https") {
			return provider.Image{}, ErrRemote
		}
		return provider.Image{}, errors.New("the image URL must be a data URL (data:image/png;base64,…)")
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 {
		return provider.Image{}, errors.New("the data URL must be base64-encoded (data:image/png;base64,…)")
	}
	return r.Base64(strings.ToLower(mediaType), data)
}

func (r *Reader) count() error {
	r.n++
	if r.n > r.lim.MaxPerRequest {
		return fmt.Errorf("a request may carry at most %d images (server.images.maxPerRequest)", r.lim.MaxPerRequest)
	}
	return nil
}

func (r *Reader) tooLarge(n int) error {
	return fmt.Errorf("the image is %d bytes; the limit is %d bytes (server.images.maxBytes)", n, r.lim.MaxBytes)
}

// check decodes raw's header: it must be an image of mediaType no larger
// than MaxSide on either side.
func (r *Reader) check(mediaType string, raw []byte) (provider.Image, error) {
	if len(raw) > r.lim.MaxBytes {
		return provider.Image{}, r.tooLarge(len(raw))
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return provider.Image{}, fmt.Errorf("the data is not a %s image that can be read", mediaType)
	}
	if "image/"+format != mediaType {
		return provider.Image{}, fmt.Errorf("the data is a %s image, not %s as declared", format, mediaType)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return provider.Image{}, errors.New("the image has no pixels")
	}
	if cfg.Width > r.lim.MaxSide || cfg.Height > r.lim.MaxSide {
		return provider.Image{}, fmt.Errorf("the image is %d×%d pixels; the limit is %d on each side", cfg.Width, cfg.Height, r.lim.MaxSide)
	}
	return provider.Image{MediaType: mediaType, Data: raw, Width: cfg.Width, Height: cfg.Height}, nil
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
