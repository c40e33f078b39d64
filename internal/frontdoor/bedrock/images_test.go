package bedrock

import (
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// imageConverse is a Converse body whose one user message holds blocks.
func imageConverse(blocks ...string) []byte {
	return []byte(`{"messages":[{"role":"user","content":[` + strings.Join(blocks, ",") + `]}]}`)
}

func imageBlock(format, data string) string {
	return `{"image":{"format":"` + format + `","source":{"bytes":"` + data + `"}}}`
}

func TestDecodeImages(t *testing.T) {
	pngData := visiontest.Base64(visiontest.PNG(800, 600))
	jpegData := visiontest.Base64(visiontest.JPEG(40, 30))
	text := `{"text":"What is on the cover?"}`
	tests := []struct {
		name   string
		lim    vision.Limits
		give   []byte
		want   []string // the last message's images, as provider.Image.String
		wantIn string   // a piece of the refusal
	}{
		{name: "png and jpeg", give: imageConverse(imageBlock("png", pngData), imageBlock("jpeg", jpegData), text), want: []string{"800×600 png", "40×30 jpeg"}},
		{name: "image alone", give: imageConverse(imageBlock("jpeg", jpegData)), want: []string{"40×30 jpeg"}},
		{name: "too large", lim: vision.Limits{MaxBytes: 1000}, give: imageConverse(imageBlock("png", pngData), text),
			wantIn: "messages[0].content[0].image.source.bytes: the image is"},
		{name: "too many", lim: vision.Limits{MaxPerRequest: 1}, give: imageConverse(imageBlock("jpeg", jpegData), imageBlock("jpeg", jpegData), text),
			wantIn: "messages[0].content[1].image.source.bytes: a request may carry at most 1 images"},
		{name: "lying format", give: imageConverse(imageBlock("gif", pngData), text), wantIn: "a png image, not image/gif"},
		{name: "unknown format", give: imageConverse(imageBlock("bmp", pngData), text), wantIn: "messages[0].content[0].image.format must be one of png, jpeg, gif, webp"},
		{name: "bad base64", give: imageConverse(imageBlock("png", "#not base64#"), text), wantIn: "not valid base64"},
		{name: "s3Location", give: imageConverse(`{"image":{"format":"png","source":{"s3Location":{"uri":"s3://b/k.png"}}}}`, text),
			wantIn: "messages[0].content[0].image.source.s3Location is not supported"},
		{name: "in an assistant message", give: []byte(`{"messages":[{"role":"user","content":[{"text":"hi"}]},{"role":"assistant","content":[` +
			imageBlock("jpeg", jpegData) + `]},{"role":"user","content":[{"text":"and?"}]}]}`), wantIn: "messages[1].content[0]: image blocks belong in user messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Decode("sonnet", tt.give, tt.lim)
			if tt.wantIn != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
					t.Fatalf("err = %v; want one saying %q", err, tt.wantIn)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, im := range req.Messages[len(req.Messages)-1].Images {
				got = append(got, im.String())
			}
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Fatalf("images %q, want %q", got, tt.want)
			}
		})
	}
}
