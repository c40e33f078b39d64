package bedrock

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/httpbinding"
)

// MaxClockSkew is how far a request's X-Amz-Date may be from the door's
// clock, as AWS allows.
const MaxClockSkew = 5 * time.Minute

const (
	sigV4Algorithm = "AWS4-HMAC-SHA256"
	amzDateFormat  = "20060102T150405Z"
	// signingService is the name Bedrock Runtime clients sign for.
	signingService = "bedrock"
)

// sigV4 is a parsed Authorization: AWS4-HMAC-SHA256 header.
type sigV4 struct {
	AccessKeyID   string
	Date          string // yyyymmdd of the credential scope
	Region        string
	Service       string
	SignedHeaders string // lower case, ;-separated, sorted
	Signature     string // hex
}

// IsSigV4 reports whether r carries a SigV4 Authorization header.
func IsSigV4(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Authorization"), sigV4Algorithm+" ")
}

// parseSigV4 reads "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/
// bedrock/aws4_request, SignedHeaders=a;b, Signature=hex".
func parseSigV4(h string) (sigV4, error) {
	rest, ok := strings.CutPrefix(h, sigV4Algorithm+" ")
	if !ok {
		return sigV4{}, errors.New("the Authorization header is not AWS4-HMAC-SHA256")
	}
	var s sigV4
	var cred string
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return sigV4{}, errors.New("the Authorization header is malformed")
		}
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			s.SignedHeaders = v
		case "Signature":
			s.Signature = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || scope[0] == "" {
		return sigV4{}, errors.New("the Authorization header's Credential must be AKID/date/region/service/aws4_request")
	}
	s.AccessKeyID, s.Date, s.Region, s.Service = scope[0], scope[1], scope[2], scope[3]
	if s.SignedHeaders == "" || len(s.Signature) != 64 {
		return sigV4{}, errors.New("the Authorization header needs SignedHeaders and a 64-digit Signature")
	}
	return s, nil
}

// accessKeyID returns the access key id r is signed with, if any.
func accessKeyID(r *http.Request) (string, error) {
	s, err := parseSigV4(r.Header.Get("Authorization"))
	return s.AccessKeyID, err
}

// signatureError is a request whose signature does not verify; its message
// is safe to send back.
type signatureError struct{ msg string }

func (e *signatureError) Error() string { return e.msg }

func mismatch(format string, args ...any) error {
	return &signatureError{msg: fmt.Sprintf(format, args...)}
}

// ignoredBySigner are the headers aws-sdk-go-v2's signer never signs; a
// client that signed one cannot be verified.
var ignoredBySigner = map[string]bool{
	"authorization": true, "user-agent": true, "x-amzn-trace-id": true, "expect": true, "transfer-encoding": true,
}

// verifySigV4 recomputes r's signature with secret over body (the whole body
// the door read) using aws-sdk-go-v2's v4 signer, and compares it in
// constant time. X-Amz-Date must be within MaxClockSkew of now; a
// x-amz-content-sha256 header must be the body's hash. Any failure is a
// *signatureError.
func verifySigV4(ctx context.Context, r *http.Request, body []byte, secret string, now time.Time) error {
	s, err := parseSigV4(r.Header.Get("Authorization"))
	if err != nil {
		return mismatch("%v", err)
	}
	if s.Service != signingService {
		return mismatch("the request is signed for service %q; Bedrock Runtime requests are signed for %q", truncate(s.Service, 40), signingService)
	}
	signedAt, err := time.Parse(amzDateFormat, r.Header.Get("X-Amz-Date"))
	if err != nil {
		return mismatch("the request needs an X-Amz-Date header (yyyymmddThhmmssZ)")
	}
	if d := now.Sub(signedAt); d > MaxClockSkew || d < -MaxClockSkew {
		return mismatch("Signature expired: %s is not within 5 minutes of the server's time %s; check the client's clock",
			signedAt.UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat))
	}
	if s.Date != signedAt.UTC().Format("20060102") {
		return mismatch("the credential scope's date %s is not the date of X-Amz-Date", truncate(s.Date, 20))
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payloadHash {
		return mismatch("x-amz-content-sha256 does not match the SHA-256 of the request body")
	}

	var want string
	if slices.Contains(strings.Split(s.SignedHeaders, ";"), ":authority") {
		// The JavaScript SDK's HTTP/2 handler signs the :authority
		// pseudo-header in place of host, which aws-sdk-go-v2's signer
		// cannot express (it always signs host).
		want, err = authoritySignature(r, s, payloadHash, len(body), secret, signedAt)
	} else {
		want, err = sdkSignature(ctx, r, s, payloadHash, len(body), secret, signedAt)
	}
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(s.Signature)) != 1 {
		return mismatch("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
	}
	return nil
}

// sdkSignature recomputes the signature with aws-sdk-go-v2's v4 signer,
// over a copy of r holding only the headers the client signed.
func sdkSignature(ctx context.Context, r *http.Request, s sigV4, payloadHash string, bodyLen int, secret string, signedAt time.Time) (string, error) {
	vreq, token, err := canonicalRequest(r, s.SignedHeaders, bodyLen)
	if err != nil {
		return "", err
	}
	creds := aws.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: secret, SessionToken: token}
	if err := v4.NewSigner().SignHTTP(ctx, creds, vreq, payloadHash, s.Service, s.Region, signedAt); err != nil {
		return "", mismatch("the signature could not be computed: %v", err)
	}
	want, err := parseSigV4(vreq.Header.Get("Authorization"))
	if err != nil {
		return "", mismatch("the signature could not be computed: %v", err)
	}
	if want.SignedHeaders != s.SignedHeaders {
		return "", mismatch("the signed headers %q cannot be verified (this server signs %q)", truncate(s.SignedHeaders, 200), want.SignedHeaders)
	}
	return want.Signature, nil
}

// authoritySignature computes SigV4 as the signer does (canonical request,
// string to sign, derived key), for requests whose signed headers name
// :authority, whose value is the request's host.
func authoritySignature(r *http.Request, s sigV4, payloadHash string, bodyLen int, secret string, signedAt time.Time) (string, error) {
	var canon strings.Builder
	canon.WriteString(r.Method + "\n")
	canon.WriteString(httpbinding.EscapePath(r.URL.EscapedPath(), false) + "\n")
	canon.WriteString(canonicalQuery(r.URL.Query()) + "\n")
	names := strings.Split(s.SignedHeaders, ";")
	if !slices.IsSorted(names) {
		return "", mismatch("SignedHeaders must be sorted")
	}
	for _, name := range names {
		var values []string
		switch name {
		case ":authority", "host":
			values = []string{r.Host}
		case "content-length":
			values = []string{strconv.Itoa(bodyLen)}
		default:
			if ignoredBySigner[name] {
				return "", mismatch("the signed header %q cannot be verified; do not sign it", truncate(name, 40))
			}
			values = slices.Clone(r.Header.Values(name))
		}
		if len(values) == 0 {
			return "", mismatch("the signed header %q is missing from the request", truncate(name, 40))
		}
		for i, v := range values {
			values[i] = strings.Join(strings.Fields(v), " ")
		}
		canon.WriteString(name + ":" + strings.Join(values, ",") + "\n")
	}
	canon.WriteString("\n" + s.SignedHeaders + "\n" + payloadHash)

	scope := s.Date + "/" + s.Region + "/" + s.Service + "/aws4_request"
	hash := sha256.Sum256([]byte(canon.String()))
	toSign := sigV4Algorithm + "\n" + signedAt.UTC().Format(amzDateFormat) + "\n" + scope + "\n" + hex.EncodeToString(hash[:])
	key := hmacSHA256([]byte("AWS4"+secret), s.Date)
	for _, part := range []string{s.Region, s.Service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	return hex.EncodeToString(hmacSHA256(key, toSign)), nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalQuery is the query sorted by key then value, each escaped the
// AWS way.
func canonicalQuery(q url.Values) string {
	keys := slices.Sorted(maps.Keys(q))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		vs := slices.Sorted(slices.Values(q[k]))
		for _, v := range vs {
			parts = append(parts, httpbinding.EscapePath(k, true)+"="+httpbinding.EscapePath(v, true))
		}
	}
	return strings.Join(parts, "&")
}

// canonicalRequest is a copy of r holding only the headers the client
// signed, for the signer to sign again. It returns the session token the
// client signed, if any.
func canonicalRequest(r *http.Request, signedHeaders string, bodyLen int) (*http.Request, string, error) {
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	vreq := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{}}
	names := strings.Split(signedHeaders, ";")
	seenHost, token := false, ""
	for _, name := range names {
		switch {
		case name == "host":
			seenHost = true
		case name == "content-length":
			vreq.ContentLength = int64(bodyLen)
		case ignoredBySigner[name]:
			return nil, "", mismatch("the signed header %q cannot be verified; do not sign it", truncate(name, 40))
		default:
			values := r.Header.Values(name)
			if len(values) == 0 {
				return nil, "", mismatch("the signed header %q is missing from the request", truncate(name, 40))
			}
			vreq.Header[http.CanonicalHeaderKey(name)] = values
			if name == "x-amz-security-token" {
				token = values[0]
			}
		}
	}
	if !seenHost {
		return nil, "", mismatch("the signature must cover the host header")
	}
	return vreq, token, nil
}
