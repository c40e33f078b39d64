package openai_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// imageRequest asks question about an 800×600 PNG and a 40×30 JPEG.
func imageRequest(model, question string) *provider.Request {
	return &provider.Request{Model: model, System: "You are the store assistant.", MaxTokens: 1000,
		Messages: []provider.Message{{Role: provider.RoleUser, Content: question, Images: []provider.Image{
			{MediaType: provider.ImagePNG, Data: visiontest.PNG(800, 600), Width: 800, Height: 600, Detail: "high"},
			{MediaType: provider.ImageJPEG, Data: visiontest.JPEG(40, 30), Width: 40, Height: 30},
		}}}}
}

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
				_, base := upstream(t, sim.Settings{})
				p := newProvider(t, base)
				req := imageRequest("local", tt.question)
				var resp *provider.Response
				var err error
				if streamed {
					resp, err = p.Stream(context.Background(), req, func(string) error { return nil })
				} else {
					resp, err = p.Complete(context.Background(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasSuffix(resp.Text, tt.want) {
					t.Errorf("answer %q does not end with %q: the images did not reach the model", resp.Text, tt.want)
				}
				if got, want := resp.Usage.Input(), sim.InputTokens(req); got != want || want < 640+2 {
					t.Errorf("input tokens %d, want %d with the images' %d", got, want, 640+2)
				}
			})
		}
	}
}
