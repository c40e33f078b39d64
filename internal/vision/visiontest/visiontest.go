// Package visiontest makes small images for tests of the paths that carry
// them: a PNG, a JPEG and a GIF of a given size, encoded by the standard
// library, and their base64 and data-URL forms.
package visiontest

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
)

// picture is a w×h gradient, so that encoders have something to encode.
func picture(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(x), G: uint8(y), B: 128, A: 255})
		}
	}
	return img
}

// PNG is a w×h PNG image.
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, picture(w, h)); err != nil {
		panic(err) // an in-memory encode of a valid image cannot fail
	}
	return b.Bytes()
}

// JPEG is a w×h JPEG image.
func JPEG(w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, picture(w, h), nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// GIF is a w×h GIF image.
func GIF(w, h int) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, picture(w, h), nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// Base64 is data in standard base64.
func Base64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

// DataURL is data as a data URL of mediaType.
func DataURL(mediaType string, data []byte) string {
	return "data:" + mediaType + ";base64," + Base64(data)
}
