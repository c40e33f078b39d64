// Package vision reads the images a vendor front door's request carries
// inline (base64 data or a data URL), or names by a remote URL on a host
// the operator allows, and holds them to the operator's bounds: size after
// decoding, count per request, pixels per side. It checks that the bytes
// are an image of the media type declared, by decoding the image's
// header, so a model is never sent a file that its vendor would refuse or
// misread. A remote URL is only checked when the request is decoded; the
// Fetcher fetches it later, once the caller is authenticated and admitted.
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
	// Hosts are the hosts remote image URLs may name; empty refuses every
	// remote URL (ErrRemote).
	Hosts Hosts
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

// ErrRemote is the refusal of an image given by its address when no host
// is allowed: fmgate then takes images inline only, and fetches nothing on
// a client's behalf.
var ErrRemote = errors.New("remote image URLs are off: fmgate fetches an image only from a host the operator lists in server.images.allowedHosts; send the image inline, base64-encoded")

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
		return provider.Image{}, r.lim.tooLarge(n)
	}
	raw, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil {
		return provider.Image{}, fmt.Errorf("the image data is not valid base64: %w", err)
	}
	return r.lim.check(mediaType, raw)
}

// URL reads an image given by a URL: a data URL
// (data:image/png;base64,…), or a remote http or https URL (see Remote).
func (r *Reader) URL(url string) (provider.Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		if scheme, _, _ := strings.Cut(url, ":"); strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https") {
			return r.Remote(url)
		}
		return provider.Image{}, errors.New("the image URL must be a data URL (data:image/png;base64,…) or an https URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 {
		return provider.Image{}, errors.New("the data URL must be base64-encoded (data:image/png;base64,…)")
	}
	return r.Base64(strings.ToLower(mediaType), data)
}

// Remote reads an image given by its http or https URL: a pending
// reference (provider.Image.URL, no bytes) for the Fetcher, counted
// against MaxPerRequest. The URL must be https (http only from a loopback
// host) on a host of Limits.Hosts; with none, it is ErrRemote.
func (r *Reader) Remote(url string) (provider.Image, error) {
	if err := r.count(); err != nil {
		return provider.Image{}, err
	}
	if len(r.lim.Hosts) == 0 {
		return provider.Image{}, ErrRemote
	}
	u, err := r.lim.Hosts.check(url)
	if err != nil {
		return provider.Image{}, err
	}
	return provider.Image{URL: u.String()}, nil
}

func (r *Reader) count() error {
	r.n++
	if r.n > r.lim.MaxPerRequest {
		return fmt.Errorf("a request may carry at most %d images (server.images.maxPerRequest)", r.lim.MaxPerRequest)
	}
	return nil
}

func (l Limits) tooLarge(n int) error {
	return fmt.Errorf("the image is %d bytes; the limit is %d bytes (server.images.maxBytes)", n, l.MaxBytes)
}

// check decodes raw's header: it must be an image of mediaType no larger
// than MaxSide on either side. l has its defaults.
func (l Limits) check(mediaType string, raw []byte) (provider.Image, error) {
	if len(raw) > l.MaxBytes {
		return provider.Image{}, l.tooLarge(len(raw))
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
	if cfg.Width > l.MaxSide || cfg.Height > l.MaxSide {
		return provider.Image{}, fmt.Errorf("the image is %d×%d pixels; the limit is %d on each side", cfg.Width, cfg.Height, l.MaxSide)
	}
	return provider.Image{MediaType: mediaType, Data: raw, Width: cfg.Width, Height: cfg.Height}, nil
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
