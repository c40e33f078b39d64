package anthropic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

func TestImagesReachTheServer(t *testing.T) {
	tests := []struct {
		lang, question, want string
	}{
		{"en", "What manga is on this cover?", "(I looked at 2 images: 800×600 png, 40×30 jpeg.)"},
		{"ja", "この表紙の漫画は何ですか？", "（画像を2枚見ました：800×600 png、40×30 jpeg。）"},
	}
	for _, tt := range tests {
		for _, streamed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streamed=%v", tt.lang, streamed), func(t *testing.T) {
				_, endpoint := upstream(t)
				p := newProvider(t, endpoint)
				req := request(tt.question)
				req.MaxTokens = 1000
				req.Messages[0].Images = []provider.Image{
					{MediaType: provider.ImagePNG, Data: visiontest.PNG(800, 600), Width: 800, Height: 600},
					{MediaType: provider.ImageJPEG, Data: visiontest.JPEG(40, 30), Width: 40, Height: 30},
				}
				text, resp, err := call(context.Background(), p, req, streamed)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasSuffix(text, tt.want) {
					t.Errorf("answer %q does not end with %q: the images did not reach the model", text, tt.want)
				}
				if got, want := resp.Usage.Input(), sim.InputTokens(req); got != want || want < 640+2 {
					t.Errorf("input tokens %d, want %d with the images' %d", got, want, 640+2)
				}
			})
		}
	}
}

func TestImageAloneReachesTheServer(t *testing.T) {
	_, endpoint := upstream(t)
	p := newProvider(t, endpoint)
	req := request("")
	req.Messages[0].Images = []provider.Image{{MediaType: provider.ImageGIF, Data: visiontest.GIF(3, 2), Width: 3, Height: 2}}
	text, _, err := call(context.Background(), p, req, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "(I looked at 1 image: 3×2 gif.)") {
		t.Errorf("answer %q does not mention the image", text)
	}
}
