package stream_test

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/stream"
)

// printSender stands in for a WebSocket connection: it shows the answer
// text once the done frame arrives.
type printSender struct{ text *string }

func (p printSender) Send(_ context.Context, frame []byte) error {
	f, err := stream.DecodeFrame(frame)
	if err != nil {
		return err
	}
	switch f.Type {
	case stream.TypeChunk:
		*p.text += f.Chunk.Text
	case stream.TypeDone:
		fmt.Printf("%s (tier %s)\n", *p.text, f.Done.Tier)
	}
	return nil
}

func Example() {
	s := stream.New(context.Background(), printSender{text: new(string)}, "r1", stream.DefaultConfig(), nil)
	defer s.Close()

	// The model's deltas go to Write; here a character arrives in two halves.
	emit := s.Write
	if err := emit("こんにちは\xe3\x80"); err != nil {
		return // the client is gone or too slow: cancel the model call
	}
	if err := emit("\x82"); err != nil {
		return
	}
	if err := s.Finish(stream.Done{Tier: "sonnet", Confidence: 1}); err != nil {
		fmt.Println("done not delivered:", err)
	}
	// Output: こんにちは。 (tier sonnet)
}
