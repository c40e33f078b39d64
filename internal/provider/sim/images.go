package sim

import (
	"fmt"
	"strings"

	"github.com/fmgate/fmgate/internal/provider"
)

// withImages ends answer with a sentence saying which images the model
// was sent ("(I looked at 1 image: 800×600 png.)", in the user's
// language), so that a test can see an image reach the model, whatever
// wire carried it.
func withImages(req *provider.Request, answer string) string {
	var seen []string
	for _, m := range req.Messages {
		for _, im := range m.Images {
			seen = append(seen, im.String())
		}
	}
	if len(seen) == 0 {
		return answer
	}
	if detectLanguage(questionText(req), req.Locale) == japanese {
		return answer + fmt.Sprintf("\n\n（画像を%d枚見ました：%s。）", len(seen), strings.Join(seen, "、"))
	}
	noun := "images"
	if len(seen) == 1 {
		noun = "image"
	}
	return answer + fmt.Sprintf("\n\n(I looked at %d %s: %s.)", len(seen), noun, strings.Join(seen, ", "))
}
