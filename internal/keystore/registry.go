package keystore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxKeys bounds the keys a registry holds (every instance caches them
// all): creating one more is refused.
const MaxKeys = 10_000

// Spec is what an operator sets on a key: at creation, or in part later
// (Patch).
type Spec struct {
	Name              string    `json:"name"`
	Team              string    `json:"team"`
	App               string    `json:"app"`
	UserID            string    `json:"userId"`
	Tier              string    `json:"tier"`
	Priority          string    `json:"priority"`
	Models            []string  `json:"models"`
	MonthlyRequests   int       `json:"monthlyRequests"`
	RequestsPerMinute int       `json:"requestsPerMinute"`
	Concurrent        int       `json:"concurrent"`
	DailyCostUSD      float64   `json:"dailyCostUsd"`
	MonthlyCostUSD    float64   `json:"monthlyCostUsd"`
	ExpiresAt         time.Time `json:"expiresAt"`
	// PayloadLog logs the payload of every turn made with the key (the
	// gateway's payloadLog must be on).
	PayloadLog bool `json:"payloadLog"`
	// Guardrails names the guardrails profile the key's turns are
	// checked under (guardrails.profiles); empty: none of its own.
	Guardrails string `json:"guardrails"`
	// Bedrock asks for an access key id and secret access key that sign
	// Bedrock requests (SigV4), instead of a bearer secret.
	Bedrock bool `json:"bedrock"`
}

// Validator checks a key's policy against the gateway's configuration
// (its tiers, priorities); nil accepts any.
type Validator func(r Record) error

// Registry manages keys over a Store and answers lookups from a cache of
// all of them, refreshed when the store's version changes (Run polls it)
// and at once after a change made here.
type Registry struct {
	store    Store
	hashKey  []byte
	sealKey  []byte // nil: no key may sign Bedrock requests
	now      func() time.Time
	validate Validator
	log      *slog.Logger
	changed  func()

	mu      sync.Mutex // serializes changes and refreshes
	version int64
	cache   atomic.Pointer[cache]
}

type cache struct {
	byHash map[string]*Record
	n      int
}

// Options configure a Registry.
type Options struct {
	// HashKey keys the hash secrets are stored as; every instance of a
	// fleet must use the same.
	HashKey []byte
	// SealKey (32 bytes) seals the secret access keys of Bedrock signing
	// keys; nil refuses to create such keys.
	SealKey  []byte
	Now      func() time.Time
	Validate Validator
	Log      *slog.Logger
	// Changed is called after each change made here (a fleet tells its
	// other instances, so that they refresh at once); nil: nothing.
	Changed func()
}

// NewRegistry returns a registry over store and loads its keys.
func NewRegistry(ctx context.Context, store Store, opts Options) (*Registry, error) {
	if len(opts.HashKey) == 0 {
		return nil, errors.New("keystore: a hash key is required")
	}
	if opts.SealKey != nil && len(opts.SealKey) != 32 {
		return nil, fmt.Errorf("keystore: the seal key must be 32 bytes, not %d", len(opts.SealKey))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Changed == nil {
		opts.Changed = func() {}
	}
	r := &Registry{store: store, hashKey: opts.HashKey, sealKey: opts.SealKey, now: opts.Now, validate: opts.Validate, log: opts.Log, changed: opts.Changed}
	r.cache.Store(&cache{byHash: map[string]*Record{}})
	if err := r.Refresh(ctx); err != nil {
		// Start without them: Run loads them once the store answers.
		r.log.Warn("the key store is unreachable: run-time keys are refused until it answers", "err", err)
	}
	return r, nil
}

// hash is the keyed hash a secret is stored as.
func (r *Registry) hash(secret string) string {
	m := hmac.New(sha256.New, r.hashKey)
	m.Write([]byte(secret))
	return hex.EncodeToString(m.Sum(nil))
}

// Lookup returns the key whose secret (or, for a Bedrock signing key, whose
// access key id) is secret, when it is usable now: not revoked, not
// expired, and either its current secret or its previous one within the
// rotation's grace.
func (r *Registry) Lookup(secret string) (Record, bool) {
	k, _, ok := r.lookup(secret)
	return k, ok
}

// lookup is Lookup, also telling whether secret is the key's previous one.
func (r *Registry) lookup(secret string) (Record, bool, bool) {
	c := r.cache.Load()
	if c.n == 0 {
		return Record{}, false, false
	}
	h := r.hash(secret)
	k, ok := c.byHash[h]
	if !ok {
		return Record{}, false, false
	}
	now := r.now()
	if k.Status(now) != "active" {
		return Record{}, false, false
	}
	prev := k.Hash != h
	if prev && !now.Before(k.PrevUntil) {
		return Record{}, false, false // the previous secret, past its grace
	}
	return *k, prev, true
}

// Empty reports whether the registry holds no key at all.
func (r *Registry) Empty() bool { return r.cache.Load().n == 0 }

// SigningSecret returns the secret access key of the Bedrock signing key
// whose access key id is akid, when it is usable now.
func (r *Registry) SigningSecret(akid string) (string, bool) {
	k, prev, ok := r.lookup(akid)
	sealed := k.SealedSecret
	if prev {
		sealed = k.PrevSealed
	}
	if !ok || len(sealed) == 0 || r.sealKey == nil {
		return "", false
	}
	secret, err := open(r.sealKey, sealed)
	if err != nil {
		r.log.Warn("a Bedrock signing key's secret does not open: was FMGATE_KEY_SEAL_KEY changed?", "key", k.ID, "err", err)
		return "", false
	}
	return secret, true
}

// Refresh reloads the cache when the store changed since the last load.
func (r *Registry) Refresh(ctx context.Context) error {
	v, err := r.store.Version(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == r.version && r.version != 0 {
		return nil
	}
	return r.reloadLocked(ctx)
}

func (r *Registry) reloadLocked(ctx context.Context) error {
	v, err := r.store.Version(ctx)
	if err != nil {
		return err
	}
	all, err := r.store.List(ctx)
	if err != nil {
		return err
	}
	c := &cache{byHash: make(map[string]*Record, len(all)), n: len(all)}
	for i := range all {
		k := &all[i]
		c.byHash[k.Hash] = k
		if k.PrevHash != "" {
			c.byHash[k.PrevHash] = k
		}
	}
	r.cache.Store(c)
	r.version = v
	return nil
}

// Run refreshes the cache every interval until ctx ends, so that a change
// made on another instance (a revocation) applies here within interval.
func (r *Registry) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		err := r.Refresh(rctx)
		cancel()
		switch {
		case err != nil && !failing:
			r.log.Warn("the key store is unreachable: keys created, rotated or revoked elsewhere apply here once it answers", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("the key store answers again")
			failing = false
		}
	}
}

// List returns every key, newest first.
func (r *Registry) List(ctx context.Context) ([]Record, error) {
	all, err := r.store.List(ctx)
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	// Ids grow with time (newID): newest first is their reverse order.
	return all, nil
}

// Get returns the key id.
func (r *Registry) Get(ctx context.Context, id string) (Record, bool, error) {
	return r.store.Get(ctx, id)
}

// Issued is a key as created or rotated: its record and the secret, shown
// this once.
type Issued struct {
	Record Record `json:"key"`
	// Secret is the bearer key; for a Bedrock signing key, its secret
	// access key (Record.AccessKeyID is the id it goes with).
	Secret string `json:"secret"`
}

// ErrNotFound is returned for an id no key has.
var ErrNotFound = errors.New("no such key")

// InvalidError is a key spec the gateway cannot take.
type InvalidError struct{ Problems []string }

func (e *InvalidError) Error() string { return strings.Join(e.Problems, "; ") }

// Create makes a key from spec on behalf of by.
func (r *Registry) Create(ctx context.Context, spec Spec, by string) (Issued, error) {
	now := r.now().UTC()
	k := Record{ID: newID(now), CreatedAt: now, UpdatedAt: now, CreatedBy: by}
	apply(&k, spec)
	if k.UserID == "" {
		k.UserID = "key:" + k.ID
	}
	if err := r.check(k, now); err != nil {
		return Issued{}, err
	}
	issued, err := r.issue(&k, spec.Bedrock)
	if err != nil {
		return Issued{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache.Load().n >= MaxKeys {
		return Issued{}, &InvalidError{Problems: []string{fmt.Sprintf("the gateway holds %d keys, its limit: revoke keys it no longer needs", MaxKeys)}}
	}
	if err := r.store.Put(ctx, k); err != nil {
		return Issued{}, err
	}
	issued.Record = k
	defer r.changed()
	return issued, r.reloadLocked(ctx)
}

// issue draws k's secret (or access key pair) and sets its hash.
func (r *Registry) issue(k *Record, bedrock bool) (Issued, error) {
	if bedrock || k.AccessKeyID != "" {
		if r.sealKey == nil {
			return Issued{}, &InvalidError{Problems: []string{"bedrock: keys that sign Bedrock requests need FMGATE_KEY_SEAL_KEY (32 bytes, hex or base64) in the gateway's environment to keep their secret sealed"}}
		}
		akid := "FMAK" + strings.ToUpper(hex.EncodeToString(random(8)))
		secret := base64.RawURLEncoding.EncodeToString(random(30))
		sealed, err := seal(r.sealKey, secret)
		if err != nil {
			return Issued{}, err
		}
		k.AccessKeyID, k.SealedSecret, k.Hash, k.Prefix = akid, sealed, r.hash(akid), akid
		return Issued{Secret: secret}, nil
	}
	secret := "fmk_" + base64.RawURLEncoding.EncodeToString(random(24))
	k.Hash, k.Prefix = r.hash(secret), secret[:10]
	return Issued{Secret: secret}, nil
}

// Patch is a partial Spec: only the fields sent change.
type Patch struct {
	Name              *string    `json:"name"`
	Team              *string    `json:"team"`
	App               *string    `json:"app"`
	UserID            *string    `json:"userId"`
	Tier              *string    `json:"tier"`
	Priority          *string    `json:"priority"`
	Models            *[]string  `json:"models"`
	MonthlyRequests   *int       `json:"monthlyRequests"`
	RequestsPerMinute *int       `json:"requestsPerMinute"`
	Concurrent        *int       `json:"concurrent"`
	DailyCostUSD      *float64   `json:"dailyCostUsd"`
	MonthlyCostUSD    *float64   `json:"monthlyCostUsd"`
	ExpiresAt         *time.Time `json:"expiresAt"`
	PayloadLog        *bool      `json:"payloadLog"`
	Guardrails        *string    `json:"guardrails"`
}

// Fields names the fields p sets, by their JSON names, in the order Patch
// declares them: what an update changes, for its audit.
func (p Patch) Fields() []string {
	v := reflect.ValueOf(p)
	var out []string
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
	}
	return out
}

// Update applies p to key id on behalf of by.
func (r *Registry) Update(ctx context.Context, id string, p Patch, by string) (Record, error) {
	return r.change(ctx, id, func(k *Record, now time.Time) (Issued, error) {
		set(&k.Name, p.Name)
		set(&k.Team, p.Team)
		set(&k.App, p.App)
		set(&k.UserID, p.UserID)
		set(&k.Tier, p.Tier)
		set(&k.Priority, p.Priority)
		set(&k.Models, p.Models)
		set(&k.MonthlyRequests, p.MonthlyRequests)
		set(&k.RequestsPerMinute, p.RequestsPerMinute)
		set(&k.Concurrent, p.Concurrent)
		set(&k.DailyCostUSD, p.DailyCostUSD)
		set(&k.MonthlyCostUSD, p.MonthlyCostUSD)
		set(&k.ExpiresAt, p.ExpiresAt)
		set(&k.PayloadLog, p.PayloadLog)
		set(&k.Guardrails, p.Guardrails)
		return Issued{}, r.check(*k, now)
	})
}

// Rotate gives key id a new secret; the old one keeps working for grace.
func (r *Registry) Rotate(ctx context.Context, id string, grace time.Duration, by string) (Issued, error) {
	var issued Issued
	k, err := r.change(ctx, id, func(k *Record, now time.Time) (Issued, error) {
		if k.Status(now) != "active" {
			return Issued{}, &InvalidError{Problems: []string{fmt.Sprintf("the key is %s: only an active key rotates", k.Status(now))}}
		}
		old, oldSealed := k.Hash, k.SealedSecret
		var err error
		issued, err = r.issue(k, false)
		if err != nil {
			return Issued{}, err
		}
		k.PrevHash, k.PrevSealed, k.PrevUntil = old, oldSealed, now.Add(grace)
		return issued, nil
	})
	issued.Record = k
	return issued, err
}

// Revoke ends key id at once, on every instance within the refresh
// interval.
func (r *Registry) Revoke(ctx context.Context, id, by string) (Record, error) {
	return r.change(ctx, id, func(k *Record, now time.Time) (Issued, error) {
		if k.RevokedAt.IsZero() {
			k.RevokedAt = now
		}
		return Issued{}, nil
	})
}

// change applies fn to key id and stores it.
func (r *Registry) change(ctx context.Context, id string, fn func(k *Record, now time.Time) (Issued, error)) (Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok, err := r.store.Get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if !ok {
		return Record{}, ErrNotFound
	}
	now := r.now().UTC()
	if _, err := fn(&k, now); err != nil {
		return Record{}, err
	}
	k.UpdatedAt = now
	if err := r.store.Put(ctx, k); err != nil {
		return Record{}, err
	}
	defer r.changed()
	return k, r.reloadLocked(ctx)
}

// check validates k's fields and, through the validator, its policy.
func (r *Registry) check(k Record, now time.Time) error {
	var p []string
	if strings.TrimSpace(k.Name) == "" {
		p = append(p, "name: must not be empty")
	}
	for field, v := range map[string]string{"name": k.Name, "team": k.Team, "app": k.App, "userId": k.UserID} {
		if len(v) > 128 {
			p = append(p, field+": must be at most 128 bytes")
		}
	}
	if k.MonthlyRequests < 0 {
		p = append(p, "monthlyRequests: must be >= 0 (0: no quota)")
	}
	if k.DailyCostUSD < 0 {
		p = append(p, "dailyCostUsd: must be >= 0 (0: no budget)")
	}
	if k.MonthlyCostUSD < 0 {
		p = append(p, "monthlyCostUsd: must be >= 0 (0: no budget)")
	}
	if !k.ExpiresAt.IsZero() && !k.ExpiresAt.After(now) && k.RevokedAt.IsZero() {
		p = append(p, "expiresAt: must be in the future")
	}
	if r.validate != nil {
		if err := r.validate(k); err != nil {
			for _, line := range strings.Split(err.Error(), "; ") {
				if !slices.Contains(p, line) { // the policy's check may repeat one of the above
					p = append(p, line)
				}
			}
		}
	}
	if len(p) > 0 {
		return &InvalidError{Problems: p}
	}
	return nil
}

func apply(k *Record, s Spec) {
	k.Name, k.Team, k.App, k.UserID = strings.TrimSpace(s.Name), s.Team, s.App, s.UserID
	k.Tier, k.Priority, k.Models = s.Tier, s.Priority, s.Models
	k.RequestsPerMinute, k.Concurrent = s.RequestsPerMinute, s.Concurrent
	k.MonthlyRequests, k.DailyCostUSD, k.MonthlyCostUSD, k.ExpiresAt = s.MonthlyRequests, s.DailyCostUSD, s.MonthlyCostUSD, s.ExpiresAt
	k.PayloadLog, k.Guardrails = s.PayloadLog, s.Guardrails
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// newID is a key's public id: time-ordered, then random.
func newID(now time.Time) string {
	return fmt.Sprintf("key_%012x%s", now.UnixMilli(), hex.EncodeToString(random(4)))
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return b
}

// seal encrypts secret with AES-256-GCM under key, the nonce first.
func seal(key []byte, secret string) ([]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	nonce := random(aead.NonceSize())
	return aead.Seal(nonce, nonce, []byte(secret), nil), nil
}

func open(key, sealed []byte) (string, error) {
	aead, err := gcm(key)
	if err != nil {
		return "", err
	}
	if len(sealed) < aead.NonceSize() {
		return "", errors.New("sealed secret too short")
	}
	b, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], nil)
	return string(b), err
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("keystore: seal key: %w", err)
	}
	return cipher.NewGCM(block)
}

// ParseSealKey reads a 32-byte key written in hex or base64.
func ParseSealKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("want 32 bytes written in hex (64 characters) or base64")
}
