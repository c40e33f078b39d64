package bedrock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/fmgate/fmgate/internal/config"
	door "github.com/fmgate/fmgate/internal/frontdoor/bedrock"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

const sonnetID = "anthropic.claude-3-5-sonnet-20240620-v1:0"

// noSleep makes the simulator answer at once, keeping its fault logic.
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// h2c is what fmgate's listeners speak: HTTP/1.1 and unencrypted HTTP/2.
func h2c() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = h2c()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// startSim serves a simulator with one model, "sonnet", on Bedrock's wire.
func startSim(t *testing.T) (*sim.Sim, *httptest.Server) {
	t.Helper()
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{
		"sonnet": {ModelID: sonnetID, TTFTMs: 1, TokensPerSecond: 1000},
	}}, sim.Options{Sleep: noSleep})
	if err != nil {
		t.Fatal(err)
	}
	return s, serve(t, simserver.Handler(s))
}

func newProvider(t *testing.T, endpoint string) *bedrock.Provider {
	t.Helper()
	p, err := bedrock.New(context.Background(), config.Model{
		Name: "sonnet", Provider: "bedrock", ModelID: sonnetID, Region: "us-east-1", Endpoint: endpoint,
	}, bedrock.Options{Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

func request(msg string) *provider.Request {
	return &provider.Request{Model: "sonnet", System: "You are MangaAssist.", MaxTokens: 512,
		Messages: []provider.Message{{Role: provider.RoleUser, Content: msg}}}
}

func TestAnswersJapaneseAndEnglish(t *testing.T) {
	s, srv := startSim(t)
	p := newProvider(t, srv.URL)
	tests := []struct {
		name   string
		msg    string
		stream bool
		wantJA bool
	}{
		{"ja converse", "おすすめの漫画を教えて", false, true},
		{"en converse", "Recommend a fantasy manga", false, false},
		{"ja stream", "ワンピースの最新刊はいつ出ますか", true, true},
		{"en stream", "What is the latest volume of One Piece?", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Usage("sonnet")
			var (
				resp   *provider.Response
				err    error
				deltas strings.Builder
				n      int
			)
			if tt.stream {
				resp, err = p.Stream(context.Background(), request(tt.msg), func(d string) error {
					n++
					deltas.WriteString(d)
					return nil
				})
			} else {
				resp, err = p.Complete(context.Background(), request(tt.msg))
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if resp.Text == "" || hasJapanese(resp.Text) != tt.wantJA {
				t.Fatalf("answer %q: Japanese = %v, want %v", resp.Text, hasJapanese(resp.Text), tt.wantJA)
			}
			if tt.stream && (n < 2 || deltas.String() != resp.Text) {
				t.Fatalf("%d deltas summing to %q; want several summing to the answer", n, deltas.String())
			}
			after := s.Usage("sonnet")
			want := provider.Usage{InputTokens: after.InputTokens - before.InputTokens, OutputTokens: after.OutputTokens - before.OutputTokens}
			if resp.Usage != want {
				t.Fatalf("usage %+v, the simulator billed %+v", resp.Usage, want)
			}
			if resp.StopReason != "end_turn" || resp.ModelID != sonnetID {
				t.Fatalf("stop %q model %q", resp.StopReason, resp.ModelID)
			}
		})
	}
}

func TestMaxTokensStopsTheAnswer(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	req := request("Recommend a fantasy manga")
	req.MaxTokens = 5
	resp, err := p.Stream(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "max_tokens" || resp.Usage.OutputTokens != 5 {
		t.Fatalf("stop %q after %d tokens; want max_tokens after 5", resp.StopReason, resp.Usage.OutputTokens)
	}
}

func TestFaultsAreNormalised(t *testing.T) {
	tests := []struct {
		name      string
		settings  func(*sim.Settings)
		wantKind  provider.Kind
		wantCode  string
		wantRetry time.Duration
		partial   bool // text and an estimated usage arrive before the failure
	}{
		{"outage", func(s *sim.Settings) { s.Outage = true }, provider.KindUnavailable, "ServiceUnavailableException", 0, false},
		{"throttled", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1} }, provider.KindThrottled, "ThrottlingException", time.Second, false},
		{"unavailable", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindUnavailable: 1} }, provider.KindUnavailable, "ServiceUnavailableException", 0, false},
		{"timeout", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindTimeout: 1} }, provider.KindTimeout, "ModelTimeoutException", 0, false},
		{"not ready", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindNotReady: 1} }, provider.KindNotReady, "ModelNotReadyException", 0, false},
		{"guardrail", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindGuardrail: 1} }, provider.KindGuardrail, "guardrail_intervened", 0, false},
		{"tpm ceiling", func(s *sim.Settings) { s.TPMCeiling = 1 }, provider.KindThrottled, "ThrottlingException", 0, false},
		{"cut mid-stream", func(s *sim.Settings) { s.CutAfterTokens = 4 }, provider.KindUnavailable, "", 0, true},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name + map[bool]string{false: " converse", true: " stream"}[stream]
			t.Run(name, func(t *testing.T) {
				s, srv := startSim(t)
				st, _ := s.Settings("sonnet")
				tt.settings(&st)
				if err := s.SetSettings("sonnet", st); err != nil {
					t.Fatal(err)
				}
				p := newProvider(t, srv.URL)
				var (
					resp *provider.Response
					err  error
				)
				if stream {
					resp, err = p.Stream(context.Background(), request("Recommend a long fantasy manga series"), nil)
				} else {
					resp, err = p.Complete(context.Background(), request("Recommend a long fantasy manga series"))
				}
				var pe *provider.Error
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v; want a *provider.Error", err)
				}
				if pe.Kind != tt.wantKind || (tt.wantCode != "" && pe.Code != tt.wantCode) || pe.Model != "sonnet" {
					t.Fatalf("kind %q code %q model %q; want %q %q sonnet (%v)", pe.Kind, pe.Code, pe.Model, tt.wantKind, tt.wantCode, err)
				}
				if tt.wantRetry > 0 && pe.RetryAfter != tt.wantRetry {
					t.Fatalf("retry after %v, want %v", pe.RetryAfter, tt.wantRetry)
				}
				if resp == nil {
					t.Fatal("nil response")
				}
				if tt.partial && stream {
					if resp.Text == "" || !resp.Usage.Estimated || resp.Usage.InputTokens == 0 {
						t.Fatalf("cut stream: text %q usage %+v; want the partial text and an estimated usage", resp.Text, resp.Usage)
					}
				}
			})
		}
	}
}

// TestMidStreamExceptions: Bedrock's event-stream exceptions after the
// first delta end the stream with the right kind, keeping the text so far.
func TestMidStreamExceptions(t *testing.T) {
	tests := []struct {
		exType   string
		wantKind provider.Kind
		wantCode string
	}{
		{"modelStreamErrorException", provider.KindUnavailable, "ModelStreamErrorException"},
		{"throttlingException", provider.KindThrottled, "ThrottlingException"},
		{"internalServerException", provider.KindUnavailable, "InternalServerException"},
		{"serviceUnavailableException", provider.KindUnavailable, "ServiceUnavailableException"},
	}
	for _, tt := range tests {
		t.Run(tt.exType, func(t *testing.T) {
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ew := door.NewEventWriter(w)
				_ = ew.Delta("ワンピース")
				_ = ew.Exception(tt.exType, "the model stream broke")
			}))
			p := newProvider(t, srv.URL)
			var got string
			resp, err := p.Stream(context.Background(), request("こんにちは"), func(d string) error { got += d; return nil })
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Kind != tt.wantKind || pe.Code != tt.wantCode {
				t.Fatalf("err = %v; want kind %s code %s", err, tt.wantKind, tt.wantCode)
			}
			if got != "ワンピース" || resp.Text != got || !resp.Usage.Estimated || resp.Usage.OutputTokens == 0 {
				t.Fatalf("text %q/%q usage %+v; want the delta kept and usage estimated", got, resp.Text, resp.Usage)
			}
		})
	}
}

// TestStopsWhenTheCallerGoesAway: an emit error ends the stream at once and
// is returned as is, with the text so far.
func TestStopsWhenTheCallerGoesAway(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	gone := errors.New("client gone")
	n := 0
	resp, err := p.Stream(context.Background(), request("Recommend a long fantasy manga series"), func(string) error {
		n++
		if n == 2 {
			return gone
		}
		return nil
	})
	if !errors.Is(err, gone) || n != 2 || resp.Text == "" {
		t.Fatalf("err %v after %d deltas, text %q", err, n, resp.Text)
	}
}

func TestCredentialsFromTheDefaultChain(t *testing.T) {
	_, srv := startSim(t)
	home := t.TempDir()
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "",
	} {
		t.Setenv(k, v)
	}
	m := config.Model{Name: "sonnet", Provider: "bedrock", ModelID: sonnetID, Region: "us-east-1", Endpoint: srv.URL}
	_, err := bedrock.New(context.Background(), m, bedrock.Options{})
	if !errors.Is(err, bedrock.ErrNoCredentials) {
		t.Fatalf("no credentials: err = %v, want ErrNoCredentials", err)
	}
	for _, want := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "role"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the message %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the message spans several lines: %q", err)
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
	p, err := bedrock.New(context.Background(), m, bedrock.Options{})
	if err != nil {
		t.Fatalf("with keys in the environment: %v", err)
	}
	if _, err := p.Complete(context.Background(), request("hello")); err != nil {
		t.Fatalf("a call with the environment's keys: %v", err)
	}
}

// A tier (or deployment) with an awsProfile signs with that profile's
// keys, another account's, while the others keep the default chain's; a
// profile the shared files lack is named.
func TestProfileSignsWithItsOwnKeys(t *testing.T) {
	s, _ := startSim(t)
	var mu sync.Mutex
	var signedBy []string
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
		akid, _, _ := strings.Cut(cred, "/")
		mu.Lock()
		signedBy = append(signedBy, akid)
		mu.Unlock()
		simserver.Handler(s).ServeHTTP(w, r)
	}))
	home := t.TempDir()
	creds := filepath.Join(home, "credentials")
	if err := os.WriteFile(creds, []byte("[partner]\naws_access_key_id = AKIDPARTNER\naws_secret_access_key = partner-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": creds,
		"AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "AKIDFROMENV", "AWS_SECRET_ACCESS_KEY": "secret-from-env", "AWS_SESSION_TOKEN": "",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	m := config.Model{Name: "sonnet", Provider: "bedrock", ModelID: sonnetID, Region: "us-east-1", Endpoint: srv.URL}
	for _, profile := range []string{"", "partner"} {
		m.AWSProfile = profile
		p, err := bedrock.New(context.Background(), m, bedrock.Options{})
		if err != nil {
			t.Fatalf("profile %q: %v", profile, err)
		}
		if _, err := p.Complete(context.Background(), request("hello")); err != nil {
			t.Fatalf("profile %q: %v", profile, err)
		}
	}
	if want := []string{"AKIDFROMENV", "AKIDPARTNER"}; !slices.Equal(signedBy, want) {
		t.Fatalf("signed by %v, want %v", signedBy, want)
	}
	m.AWSProfile = "nobody"
	if _, err := bedrock.New(context.Background(), m, bedrock.Options{}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("an unknown profile: %v; want it named", err)
	}
}

// TestHangingInstanceRoleProbeIsBounded: an instance-metadata endpoint that
// accepts connections and never answers (an offline machine's worst case)
// makes New fail with ErrNoCredentials once CredentialTimeout is spent,
// instead of hanging start-up.
func TestHangingInstanceRoleProbeIsBounded(t *testing.T) {
	release := make(chan struct{})
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer imds.Close()
	defer close(release)
	home := t.TempDir()
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL,
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "",
	} {
		t.Setenv(k, v)
	}
	m := config.Model{Name: "sonnet", Provider: "bedrock", ModelID: sonnetID, Region: "us-east-1"}
	_, err := bedrock.New(context.Background(), m, bedrock.Options{CredentialTimeout: 200 * time.Millisecond})
	if !errors.Is(err, bedrock.ErrNoCredentials) {
		t.Fatalf("err = %v, want ErrNoCredentials", err)
	}
}

// TestConcurrentStreams: one provider serves many streams at once, each
// with its own answer and usage (run with -race: the SDK's shared
// event-stream codec must not be shared between them).
func TestConcurrentStreams(t *testing.T) {
	s, srv := startSim(t)
	p := newProvider(t, srv.URL)
	const n = 8
	errs := make(chan error, n)
	usage := make(chan provider.Usage, n)
	for i := range n {
		go func() {
			msg := "Recommend a fantasy manga"
			if i%2 == 0 {
				msg = "おすすめの漫画を教えて"
			}
			resp, err := p.Stream(context.Background(), request(msg), nil)
			if err == nil && hasJapanese(resp.Text) != (i%2 == 0) {
				err = errors.New("answer in the wrong language: " + resp.Text)
			}
			usage <- resp.Usage
			errs <- err
		}()
	}
	var sum provider.Usage
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		sum = sum.Add(<-usage)
	}
	if billed := s.Usage("sonnet"); sum != billed {
		t.Fatalf("streams report %+v, the simulator billed %+v", sum, billed)
	}
}

// TestStopSequenceThatEndedTheAnswer: Converse says only stop_sequence;
// with one stop sequence asked for, the answer names it, JSON and
// streamed; with two, it cannot know which.
func TestStopSequenceThatEndedTheAnswer(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	for _, stops := range [][]string{{"\n"}, {"\n", "END"}} {
		want := map[int]string{1: "\n", 2: ""}[len(stops)]
		req := request("What manga do you recommend?")
		req.StopSequences = stops
		for name, call := range map[string]func() (*provider.Response, error){
			"json":   func() (*provider.Response, error) { return p.Complete(context.Background(), req) },
			"stream": func() (*provider.Response, error) { return p.Stream(context.Background(), req, nil) },
		} {
			resp, err := call()
			if err != nil || resp.StopReason != "stop_sequence" || resp.StopSequence != want || strings.Contains(resp.Text, "\n") {
				t.Fatalf("%s, stops %q: %+v (%v); want stop_sequence %q", name, stops, resp, err, want)
			}
		}
	}
}
