package gateway

import (
	"context"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
)

// ImageFetcher fetches the remote images a front door decoded as pending
// references (provider.Image.URL set, no bytes).
type ImageFetcher interface {
	// Fetch fills in each pending image of images, in place, with the
	// checked image. Its error, unless ctx is done, says in words safe
	// for the client which image could not be fetched and why.
	Fetch(ctx context.Context, images []provider.Image) error
}

// fetchImages is the step that fetches the turn's remote images, once its
// caller is authenticated and admitted and before its tokens are
// estimated: from then on they are images like the inline ones. A fetch
// that fails refuses the turn with a 400 before anything is charged.
// The turn's deadlines start again once its images are in, as they
// started once its body was read.
func (g *Gateway) fetchImages(ctx context.Context, t *Turn) error {
	pending := t.pendingImages()
	if len(pending) == 0 {
		return nil
	}
	if g.images == nil {
		return invalid("This gateway fetches no remote images: send the image inline, base64-encoded.")
	}
	ctx, span := g.tracer.Start(ctx, "fetch_images", events.WithKind(events.KindToolCall), events.WithNodeID("fetch_images"))
	defer span.End()
	span.SetTool("image_fetch", "v1")
	span.SetImages(len(pending))
	batch := make([]provider.Image, len(pending))
	for i, im := range pending {
		batch[i] = *im
	}
	if err := g.images.Fetch(ctx, batch); err != nil {
		span.SetStatus(events.StatusFailed)
		if ctx.Err() != nil {
			e := g.streamError(t, ctx.Err())
			span.SetErrorCode(e.Code)
			return e
		}
		span.SetErrorCode("image_fetch_failed")
		e := invalid("%v", err)
		e.Err = err
		return e
	}
	n := 0
	for i, im := range batch {
		*pending[i] = im
		n += len(im.Data)
	}
	span.SetImageBytes(n)
	t.Received = g.now()
	return nil
}

// pendingImages are the turn's remote images still to be fetched, in its
// message and in History.
func (t *Turn) pendingImages() []*provider.Image {
	var p []*provider.Image
	for i := range t.History {
		for j := range t.History[i].Images {
			if t.History[i].Images[j].Pending() {
				p = append(p, &t.History[i].Images[j])
			}
		}
	}
	for i := range t.Images {
		if t.Images[i].Pending() {
			p = append(p, &t.Images[i])
		}
	}
	return p
}

// RemoteImages counts the images of the turn's conversation given by a
// URL and not yet fetched: a door that answers without running the turn
// (count_tokens) refuses them, since it fetches nothing.
func (t *Turn) RemoteImages() int { return len(t.pendingImages()) }
