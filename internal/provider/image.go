package provider

import (
	"fmt"
	"math"
	"strings"
)

// Image is a picture in a user message, checked by the front door that
// decoded it: Data holds the whole file, in MediaType's format, and Width
// and Height are its size in pixels as its header gives them.
//
// An image a client named by its URL is pending until the gateway fetches
// it: URL is set and the rest, but Detail, is empty. A provider is never
// sent a pending image.
type Image struct {
	// URL is a pending image's remote address; empty once fetched and for
	// an inline image.
	URL string
	// MediaType is one of ImagePNG, ImageJPEG, ImageGIF and ImageWebP.
	MediaType string
	Data      []byte
	Width     int
	Height    int
	// Detail is OpenAI's detail level, "auto", "low", "high" or
	// "original" (empty is auto): it reaches an OpenAI tier; the other
	// vendors have none.
	Detail string
}

// Image media types every vendor takes.
const (
	ImagePNG  = "image/png"
	ImageJPEG = "image/jpeg"
	ImageGIF  = "image/gif"
	ImageWebP = "image/webp"
)

// ImageMediaTypes are the media types of images a request may carry.
var ImageMediaTypes = []string{ImagePNG, ImageJPEG, ImageGIF, ImageWebP}

// Format is the media type's subtype: "png", "jpeg", "gif" or "webp",
// Bedrock's ImageFormat.
func (im Image) Format() string {
	_, f, _ := strings.Cut(im.MediaType, "/")
	return f
}

// String describes the image without its bytes, for answers and logs:
// "800×600 png".
func (im Image) String() string { return fmt.Sprintf("%d×%d %s", im.Width, im.Height, im.Format()) }

// ImageLongSide is the longest side, in pixels, a vendor reads an image
// at: a larger image is scaled down to fit before it is tokenised.
const ImageLongSide = 1568

// ImageTokens estimates the input tokens of an image of w×h pixels by
// Anthropic's published formula, width×height/750 after scaling the image
// to fit ImageLongSide on its long side. fmgate uses it for every vendor:
// budgets and quotas need one figure before the tier is known.
func ImageTokens(w, h int) int {
	if w <= 0 || h <= 0 {
		return 0
	}
	fw, fh := float64(w), float64(h)
	if long := math.Max(fw, fh); long > ImageLongSide {
		s := ImageLongSide / long
		fw, fh = math.Round(fw*s), math.Round(fh*s)
	}
	return max(1, int(math.Ceil(fw*fh/750)))
}

// VendorImageTokens is the input tokens vendor ("openai", "anthropic",
// "bedrock", "sim") bills im at, by its published formula: OpenAI's tiles
// (85 tokens for detail "low"; else the image fit into 2048×2048, its
// short side brought down to 768, then 85 plus 170 for each 512-pixel
// tile, as for GPT-4o), and ImageTokens for Claude, on Anthropic or
// Bedrock, and for the simulator.
func VendorImageTokens(vendor string, im Image) int {
	if vendor != "openai" || im.Width <= 0 || im.Height <= 0 {
		return ImageTokens(im.Width, im.Height)
	}
	if im.Detail == "low" {
		return 85
	}
	w, h := float64(im.Width), float64(im.Height)
	if long := math.Max(w, h); long > 2048 {
		w, h = w*2048/long, h*2048/long
	}
	if short := math.Min(w, h); short > 768 {
		w, h = w*768/short, h*768/short
	}
	tiles := math.Ceil(math.Round(w)/512) * math.Ceil(math.Round(h)/512)
	return 85 + 170*int(tiles)
}

// Pending reports whether the image is a remote one still to be fetched.
func (im Image) Pending() bool { return im.URL != "" }

// ImageTokens is the estimated input tokens of m's images.
func (m *Message) ImageTokens() int { return ImagesTokens(m.Images) }

// ImagesTokens is the estimated input tokens of images.
func ImagesTokens(images []Image) int {
	n := 0
	for _, im := range images {
		n += ImageTokens(im.Width, im.Height)
	}
	return n
}

// CountImages counts the images of msgs.
func CountImages(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Images)
	}
	return n
}
